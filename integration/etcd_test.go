package integration

import (
	"testing"
	"time"

	etcdreg "github.com/go-micro/plugins/v4/registry/etcd"
	"go-micro.dev/v4/registry"
	"go.uber.org/zap"
)

// newEtcdRegistry returns go-micro's etcd registry plugin connected to s.
// The client's request timeout is timeout; it is also the dial timeout, and
// the plugin dials at once, so s must be up. The plugin has no Close: its
// etcd client lives until the test process ends (see freePort).
func newEtcdRegistry(t *testing.T, s *etcdServer, timeout time.Duration) registry.Registry {
	t.Helper()
	return newEtcdRegistryAt(t, s.Addr(), timeout)
}

// newEtcdRegistryAt is newEtcdRegistry for any address, such as a proxy's.
func newEtcdRegistryAt(t *testing.T, addr string, timeout time.Duration) registry.Registry {
	t.Helper()
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	// The etcd client logs every failed retry at warn level during an
	// outage; errors are enough.
	return etcdreg.NewRegistry(
		registry.Addrs(addr),
		registry.Timeout(timeout),
		etcdreg.LogConfig(&zc),
	)
}
