package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// embeddedEtcd is a one-member etcd server inside the program, for a try
// without an etcd at hand. It listens on loopback ports picked when it
// starts and keeps its data in a temporary directory, removed by Close.
// Stop and Start stop it and start it again on the same ports and data,
// as an outage of a real etcd would.
type embeddedEtcd struct {
	dir          string
	client, peer url.URL

	mu     sync.Mutex // serialises Start, Stop and Close
	e      *embed.Etcd
	closed bool
}

func startEmbeddedEtcd() (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "regcache-example-etcd-")
	if err != nil {
		return nil, err
	}
	s := &embeddedEtcd{dir: dir}
	for _, u := range []*url.URL{&s.client, &s.peer} {
		addr, err := freeLoopbackAddr()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		*u = url.URL{Scheme: "http", Host: addr}
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// freeLoopbackAddr returns a loopback address whose port is free now. It
// could be taken before etcd listens on it; etcd then fails to start, and
// says so.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Addr is the address clients give to the registry.
func (s *embeddedEtcd) Addr() string { return s.client.Host }

// Dir is where etcd keeps its data.
func (s *embeddedEtcd) Dir() string { return s.dir }

// Running tells whether etcd is serving.
func (s *embeddedEtcd) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e != nil
}

// Start starts etcd, or starts it again, and returns once it serves.
func (s *embeddedEtcd) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("etcd is closed")
	}
	if s.e != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = "example"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{s.peer}
	cfg.AdvertisePeerUrls = []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	// One member elects itself after an election timeout: a tenth of
	// etcd's default makes a start take milliseconds rather than seconds.
	cfg.TickMs, cfg.ElectionMs = 10, 100

	// Just after a stop, the kernel may hold the ports a little longer.
	var (
		e   *embed.Etcd
		err error
	)
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; <-retry.C {
		if e, err = embed.StartEtcd(cfg); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return errors.New("etcd did not become ready within 30s")
	}
	s.e = e
	return nil
}

// Stop stops etcd, keeping its data for Start.
func (s *embeddedEtcd) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Close stops etcd for good and removes its data.
func (s *embeddedEtcd) Close() {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	os.RemoveAll(s.dir)
}
