package etcd

import (
	"crypto/tls"
	"net"
	"time"

	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// defaultTimeout is the plugin's default for registry.Timeout, which
// bounds a Watch here as it bounds the plugin's requests.
const defaultTimeout = 5 * time.Second

// clientConfig is the configuration the plugin gives its etcd client,
// built from the registry's options: the client each watcher makes for
// itself is configured as the plugin's. The plugin does not export its
// client, and this package reads no unexported field of it.
func clientConfig(o registry.Options) clientv3.Config {
	cfg := clientv3.Config{
		Endpoints:   endpoints(o.Addrs),
		DialTimeout: o.Timeout,
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultTimeout
	}
	if o.Secure || o.TLSConfig != nil {
		cfg.TLS = o.TLSConfig
		if cfg.TLS == nil {
			// What the plugin does for registry.Secure(true) alone.
			cfg.TLS = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the plugin's behaviour
		}
	}
	if o.Context != nil {
		if c, ok := o.Context.Value(authKey{}).(credentials); ok {
			cfg.Username, cfg.Password = c.username, c.password
		}
		if zc, ok := o.Context.Value(logConfigKey{}).(*zap.Config); ok && zc != nil {
			cfg.LogConfig = zc
		}
	}
	return cfg
}

// endpoints turns registry addresses into etcd endpoints as the plugin
// does: port 2379 where none is given, addresses that do not parse
// skipped, and 127.0.0.1:2379 when none is left.
func endpoints(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if ae, ok := err.(*net.AddrError); ok && ae.Err == "missing port in address" {
			host, port, err = a, "2379", nil
		}
		if err == nil {
			out = append(out, net.JoinHostPort(host, port))
		}
	}
	if len(out) == 0 {
		out = []string{"127.0.0.1:2379"}
	}
	return out
}
