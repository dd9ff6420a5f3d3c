package integration5

import (
	"time"

	"go-micro.dev/v5/registry"
	"go-micro.dev/v5/registry/etcd"
	"go.uber.org/zap"
)

// The etcd server of the tests is in servers_test.go, integration's.

// newRegistry returns go-micro v5's etcd registry on s, with its own etcd
// client, as another process would have. timeout is the client's dial and
// request timeout. The registry has no Close: its client lives until the
// test process ends.
func newRegistry(s *etcdServer, timeout time.Duration) registry.Registry {
	zc := zap.NewProductionConfig()
	// The etcd client logs each failed retry during the outage at warn.
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return etcd.NewEtcdRegistry(registry.Addrs(s.Addr()), registry.Timeout(timeout), etcd.LogConfig(&zc))
}
