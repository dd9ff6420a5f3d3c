// Package newest pins the newest versions of the libraries that the
// library modules keep at low minimums in their go.mod files: its go.work
// adds it to the library modules, and minimal version selection raises
// every module of the workspace to what it requires. `make unit-newest`
// runs the tests of the modules that use these libraries that way.
package newest

import (
	_ "github.com/nats-io/nats.go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go-micro.dev/v5/registry"
	_ "go.opentelemetry.io/otel"
	_ "go.opentelemetry.io/otel/metric"
	_ "go.opentelemetry.io/otel/sdk/metric"
)
