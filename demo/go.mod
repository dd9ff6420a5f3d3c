module github.com/regcache/cache/demo

go 1.22

require (
	github.com/regcache/cache v0.0.0
	go-micro.dev/v4 v4.11.0
)

require (
	github.com/google/uuid v1.3.0 // indirect
	github.com/miekg/dns v1.1.43 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/net v0.30.0 // indirect
	golang.org/x/sync v0.10.0 // indirect
	golang.org/x/sys v0.26.0 // indirect
)

replace github.com/regcache/cache => ../
