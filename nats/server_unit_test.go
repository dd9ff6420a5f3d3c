//go:build unit

package nats

// Under the unit tag (`make test`), no NATS server is embedded: a test that
// needs one skips, and `make integration` runs it (server_test.go).

import "testing"

type natsServer struct{}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	t.Skip("starts an embedded NATS server: not under the unit tag (make integration runs it)")
	return nil
}

func (n *natsServer) Addr() string { return "" }
func (n *natsServer) Start()       {}
func (n *natsServer) Stop()        {}
