module github.com/regcache/cache/regcacheotel

go 1.25

require (
	github.com/regcache/cache v0.2.0
	go-micro.dev/v4 v4.11.0
	go.opentelemetry.io/otel v1.20.0
	go.opentelemetry.io/otel/metric v1.20.0
	go.opentelemetry.io/otel/sdk v1.20.0
	go.opentelemetry.io/otel/sdk/metric v1.20.0
)

require (
	github.com/go-logr/logr v1.3.0 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.3.0 // indirect
	github.com/miekg/dns v1.1.43 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.opentelemetry.io/otel/trace v1.20.0 // indirect
	golang.org/x/net v0.30.0 // indirect
	golang.org/x/sync v0.10.0 // indirect
	golang.org/x/sys v0.26.0 // indirect
	google.golang.org/protobuf v1.28.1 // indirect
)
