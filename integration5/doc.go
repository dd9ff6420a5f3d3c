// Package integration5 tests regcache's go-micro v5 flavour
// (github.com/regcache/cache/gomicro5) on a real etcd server and
// nats-server, child processes of the test (servers_test.go, the twin of
// integration's), through go-micro.dev/v5/registry/etcd and nats, with
// real go-micro v5 RPC on loopback. It is a module of its own so that the
// library modules keep go-micro v5's dependencies out of the v4 flavour. See
// docs/gomicro5.md at the repository's root.
package integration5
