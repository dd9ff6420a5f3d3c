package etcd

import (
	"crypto/tls"
	"reflect"
	"runtime"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWatcherClient: each watcher watches through an etcd client of its
// own, made at its Watch from the registry's options as they are then
// (Init's among them), and closed by its Stop. The plugin's client is not
// read: it is not exported.
func TestWatcherClient(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	w := watch(t, r)
	c := w.(*watcher).client
	if c == nil {
		t.Fatal("the watcher has no client of its own")
	}
	if got := c.Endpoints(); !reflect.DeepEqual(got, []string{s.Addr()}) {
		t.Errorf("the watcher's client on %q; want %q", got, s.Addr())
	}
	if err := r.Register(service("svc", "1", "n1"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "n1")
	w.Stop()
	if c.Ctx().Err() == nil {
		t.Error("Stop did not close the watcher's client")
	}

	// After Init, the next watcher's client is on the new address.
	s2 := startEtcd(t)
	if err := r.Init(registry.Addrs(s2.Addr())); err != nil {
		t.Fatalf("Init: %v", err)
	}
	w2 := watch(t, r)
	if got := w2.(*watcher).client.Endpoints(); !reflect.DeepEqual(got, []string{s2.Addr()}) {
		t.Errorf("after Init, the watcher's client on %q; want %q", got, s2.Addr())
	}
	if err := r.Register(service("svc", "1", "n2"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w2, "create", "n2")
}

// TestWatchFailureClosesTheClient: a Watch that fails (etcd down) leaves
// no client open behind it.
func TestWatchFailureClosesTheClient(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	if _, err := r.ListServices(); err != nil { // the plugin's connection up
		t.Fatalf("ListServices: %v", err)
	}
	s.Stop()
	before := runtime.NumGoroutine()
	if w, err := r.Watch(); err == nil {
		w.Stop()
		t.Fatal("Watch succeeded while etcd is down")
	}
	// A client left open would keep its goroutines.
	waitGoroutines(t, before)
}

// TestClientConfig: the watcher's own client is configured as the
// plugin configures its client.
func TestClientConfig(t *testing.T) {
	zc := quietLog()
	tlsConfig := &tls.Config{ServerName: "etcd"}
	for _, tc := range []struct {
		name  string
		opts  []registry.Option
		check func(t *testing.T, cfg clientv3.Config)
	}{
		{name: "defaults", check: func(t *testing.T, cfg clientv3.Config) {
			if cfg.TLS != nil || cfg.Username != "" || cfg.Password != "" {
				t.Errorf("TLS %v, user %q, password %q; want none", cfg.TLS, cfg.Username, cfg.Password)
			}
		}},
		{name: "secure", opts: []registry.Option{registry.Secure(true)}, check: func(t *testing.T, cfg clientv3.Config) {
			if cfg.TLS == nil || !cfg.TLS.InsecureSkipVerify {
				t.Errorf("TLS %+v; want the plugin's, which skips verification", cfg.TLS)
			}
		}},
		{name: "TLS", opts: []registry.Option{registry.TLSConfig(tlsConfig)}, check: func(t *testing.T, cfg clientv3.Config) {
			if cfg.TLS != tlsConfig {
				t.Errorf("TLS %+v; want the one given", cfg.TLS)
			}
		}},
		{name: "credentials and log", opts: []registry.Option{Auth("user", "secret"), LogConfig(zc)}, check: func(t *testing.T, cfg clientv3.Config) {
			if cfg.Username != "user" || cfg.Password != "secret" {
				t.Errorf("user %q, password %q", cfg.Username, cfg.Password)
			}
			if cfg.LogConfig != zc {
				t.Errorf("log configuration %v; want the one given", cfg.LogConfig)
			}
		}},
		{name: "timeout", opts: []registry.Option{registry.Timeout(3 * time.Second)}, check: func(t *testing.T, cfg clientv3.Config) {
			if cfg.DialTimeout != 3*time.Second {
				t.Errorf("dial timeout %v", cfg.DialTimeout)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o registry.Options
			for _, opt := range tc.opts {
				opt(&o)
			}
			cfg := clientConfig(o)
			if o.Timeout == 0 && cfg.DialTimeout != defaultTimeout {
				t.Errorf("dial timeout %v; want %v", cfg.DialTimeout, defaultTimeout)
			}
			tc.check(t, cfg)
		})
	}

	t.Run("credentials from the environment", func(t *testing.T) {
		// With credentials, etcd's client asks for a token as it is made:
		// etcd must answer (that authentication is off is an answer).
		s := startEtcd(t)
		t.Setenv("ETCD_USERNAME", "envuser")
		t.Setenv("ETCD_PASSWORD", "envsecret")
		r := NewRegistry(registry.Addrs(s.Addr()), LogConfig(quietLog())).(*etcdRegistry)
		cfg := clientConfig(r.Options())
		if cfg.Username != "envuser" || cfg.Password != "envsecret" {
			t.Errorf("user %q, password %q; want those of ETCD_USERNAME and ETCD_PASSWORD", cfg.Username, cfg.Password)
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		// The plugin's rules (v1.2.0, etcd.go's configure): port 2379
		// where none is given, addresses that do not parse skipped, and
		// 127.0.0.1:2379 when none is left.
		for _, tc := range []struct{ addrs, want []string }{
			{nil, []string{"127.0.0.1:2379"}},
			{[]string{""}, []string{"127.0.0.1:2379"}},
			{[]string{"10.0.0.1"}, []string{"10.0.0.1:2379"}},
			{[]string{"10.0.0.1:2380", "etcd.local", "", "a:b:c", "etcd-2.local:12379"}, []string{"10.0.0.1:2380", "etcd.local:2379", "etcd-2.local:12379"}},
		} {
			r := NewRegistry(registry.Addrs(tc.addrs...), LogConfig(quietLog())).(*etcdRegistry)
			if got := clientConfig(r.Options()).Endpoints; !reflect.DeepEqual(got, tc.want) {
				t.Errorf("addresses %q: endpoints %q; want %q", tc.addrs, got, tc.want)
			}
		}
	})
}
