//go:build unit

package etcd

// Under the unit tag (`make test`), no etcd is embedded: a test that needs
// one skips, and `make integration` runs it (server_test.go).

import "testing"

type etcdServer struct{}

type serverConfig struct{}

func startEtcdWith(t *testing.T, configure func(*serverConfig)) *etcdServer {
	t.Helper()
	t.Skip("starts an embedded etcd: not under the unit tag (make integration runs it)")
	return nil
}

func fastElection(*serverConfig) {}

func (s *etcdServer) Addr() string { return "" }
func (s *etcdServer) Start()       {}
func (s *etcdServer) Stop()        {}
