module github.com/regcache/cache/integration/pins/natsgo-1.56

go 1.25

require github.com/nats-io/nats.go v1.56.0
