package etcd

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy in front of etcd that makes the network faults a
// stopped etcd cannot: a connection that breaks and comes back, one that
// hangs, and dial attempts that can be counted.
type proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu       sync.Mutex
	mode     proxyMode
	open     map[net.Conn]bool // every connection the proxy holds, both sides
	held     []net.Conn        // accepted in hold mode, not forwarded yet
	refused  int               // connections accepted and closed in refuse mode
	accepted chan struct{}     // closed and replaced at each accept
}

type proxyMode int

const (
	forward proxyMode = iota // to etcd
	hold                     // accept, and answer nothing until forward
	refuse                   // accept and close at once: a failed dial
)

// startProxy starts a proxy to target, in forward mode, closed when the
// test ends.
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", "0"))
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &proxy{target: target, ln: ln, open: map[net.Conn]bool{}, accepted: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the address to give etcd's clients.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		close(p.accepted)
		p.accepted = make(chan struct{})
		switch p.mode {
		case forward:
			p.open[c] = true
			p.forwardLocked(c)
		case hold:
			p.open[c] = true
			p.held = append(p.held, c)
		case refuse:
			p.refused++
			c.Close()
		}
		p.mu.Unlock()
	}
}

// forwardLocked pipes c to a new connection to etcd.
func (p *proxy) forwardLocked(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		delete(p.open, c)
		c.Close()
		return
	}
	p.open[up] = true
	p.wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer p.wg.Done()
		io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
}

// set changes the mode; leaving forward mode breaks every connection.
func (p *proxy) set(mode proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == forward && mode != forward {
		p.closeAllLocked()
	}
	if mode == forward {
		for _, c := range p.held {
			p.forwardLocked(c)
		}
		p.held = nil
	}
	p.mode = mode
}

func (p *proxy) closeAllLocked() {
	for c := range p.open {
		c.Close()
	}
	p.open = map[net.Conn]bool{}
	p.held = nil
}

// waitUntil waits until done, called under the lock, is true, checking
// it at each connection accepted, or fails the test after d.
func (p *proxy) waitUntil(t *testing.T, d time.Duration, what string, done func() bool) {
	t.Helper()
	timeout := time.After(d)
	for {
		p.mu.Lock()
		ok, accepted := done(), p.accepted
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-accepted:
		case <-timeout:
			t.Fatalf("proxy: not %s within %v", what, d)
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closeAllLocked()
	p.mu.Unlock()
	p.wg.Wait()
}
