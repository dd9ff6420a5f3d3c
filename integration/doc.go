// Package integration holds the integration tests of regcache against real
// infrastructure: a real etcd server and nats-server, child processes of
// the test (servers_test.go), go-micro's etcd registry plugin, and real
// go-micro servers and clients talking over loopback. It is a separate
// module so that the root module keeps only its three light dependencies.
//
// Run it with
//
//	cd integration && go vet ./... && go test -race -count=1 ./...
package integration
