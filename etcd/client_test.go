package etcd

import (
	"context"
	"crypto/tls"
	"reflect"
	"runtime"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPluginClient: the watcher shares the plugin's etcd client, the one
// the plugin has at each Watch (Init replaces it); a registry without that
// field of that type gives none.
func TestPluginClient(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	c := pluginClient(r.plugin)
	if c == nil {
		t.Fatal("no client read from the plugin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, prefix); err != nil {
		t.Fatalf("the plugin's client: %v", err)
	}

	w := watch(t, r)
	if got := w.(*watcher).own; got != nil {
		t.Error("the watcher has a client of its own, not the plugin's")
	}
	w.Stop()

	if err := r.Init(registry.Addrs(s.Addr())); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if pluginClient(r.plugin) == c {
		t.Fatal("Init did not replace the plugin's client; the test shows nothing")
	}
	c.Close() // the plugin leaves it open
	w = watch(t, r)
	if err := r.Register(service("svc", "1", "n1"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "n1")

	type otherVersion struct {
		registry.Registry
		client *int
	}
	type valueRegistry struct {
		registry.Registry
		client *clientv3.Client
	}
	n := 7
	for _, other := range []registry.Registry{
		registry.NewMemoryRegistry(),
		&otherVersion{client: &n},
		valueRegistry{client: c},
		(*otherVersion)(nil),
		nil,
	} {
		if got := pluginClient(other); got != nil {
			t.Errorf("pluginClient(%T) = %p; want nil", other, got)
		}
	}
}

// TestOwnClient: where the plugin's client cannot be read, the watcher
// makes a client of its own from the registry's options, and closes it
// when it stops or when Watch fails.
func TestOwnClient(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	r.pluginClient = func(registry.Registry) *clientv3.Client { return nil }
	if _, err := r.ListServices(); err != nil { // the plugin's connection up
		t.Fatalf("ListServices: %v", err)
	}

	w := watch(t, r)
	own := w.(*watcher).own
	if own == nil {
		t.Fatal("the watcher has no client of its own")
	}
	if err := r.Register(service("svc", "1", "n1"), registry.RegisterTTL(time.Minute)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	mustNext(t, w, "create", "n1")
	w.Stop()
	if own.Ctx().Err() == nil {
		t.Error("Stop did not close the watcher's client")
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
		closePluginClient(t, r.plugin)
		cfg := clientConfig(r.Options())
		if cfg.Username != "envuser" || cfg.Password != "envsecret" {
			t.Errorf("user %q, password %q; want those of ETCD_USERNAME and ETCD_PASSWORD", cfg.Username, cfg.Password)
		}
		if c := pluginClient(r.plugin); c == nil || c.Username != cfg.Username || c.Password != cfg.Password {
			t.Errorf("the plugin's client has other credentials")
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		for _, addrs := range [][]string{
			nil,
			{""},
			{"10.0.0.1"},
			{"10.0.0.1:2380", "etcd.local", "", "a:b:c", "etcd-2.local:12379"},
		} {
			r := NewRegistry(registry.Addrs(addrs...), LogConfig(quietLog())).(*etcdRegistry)
			closePluginClient(t, r.plugin)
			want := pluginClient(r.plugin).Endpoints()
			if got := clientConfig(r.Options()).Endpoints; !reflect.DeepEqual(got, want) {
				t.Errorf("addresses %q: endpoints %q; the plugin's %q", addrs, got, want)
			}
		}
	})
}
