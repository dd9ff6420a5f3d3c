package integration

import (
	"io"
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards loopback TCP connections to a target address. Cut closes
// every forwarded connection and makes the proxy drop new ones at once, so
// that the clients behind it are disconnected from a server that is still
// up; Restore lets them in again. The tests use it to make changes in etcd
// while the cache's etcd client is disconnected.
type tcpProxy struct {
	l      net.Listener
	target string

	// meter, if set, counts the gRPC requests and bytes that go through.
	meter *grpcMeter

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	return startProxyWith(t, target, nil)
}

// startMeteredProxy is startProxy with a meter that counts what the clients
// behind it ask of etcd.
func startMeteredProxy(t *testing.T, target string) (*tcpProxy, *grpcMeter) {
	t.Helper()
	m := newGRPCMeter()
	return startProxyWith(t, target, m), m
}

func startProxyWith(t *testing.T, target string, m *grpcMeter) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &tcpProxy{l: l, target: target, meter: m, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's own address, host:port.
func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.drop(c)
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		u.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	defer p.drop(u)

	if p.meter != nil {
		p.meter.pipe(c, u)
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }() //nolint:errcheck
	go func() { io.Copy(c, u); done <- struct{}{} }() //nolint:errcheck
	<-done
	c.Close()
	u.Close()
	<-done
}

func (p *tcpProxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Cut disconnects every client of the proxy and keeps new ones out.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets clients connect again.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *tcpProxy) close() {
	p.Cut()
	p.l.Close()
	p.wg.Wait()
}
