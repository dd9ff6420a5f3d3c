// Package integration5 tests regcache's go-micro v5 flavour
// (github.com/regcache/cache/gomicro5) on an etcd server embedded in the
// test process, through go-micro.dev/v5/registry/etcd, with real go-micro
// v5 RPC on loopback. It is a module of its own so that neither the
// library modules nor the v4 integration module get etcd's server. See
// docs/gomicro5.md at the repository's root.
package integration5
