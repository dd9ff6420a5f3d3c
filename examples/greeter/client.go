package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/server"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
	"github.com/regcache/cache/gomicro"
	"github.com/regcache/cache/regcacheprometheus"
)

// runClient calls the greeter every cfg.every until ctx ends, and prints
// each answer to out. It finds the greeter through regcache, and serves
// regcache's status page and metrics on cfg.http.
func runClient(ctx context.Context, reg registry.Registry, cfg config, out io.Writer) error {
	service := micro.NewService(
		// As in runServer: a server, a client and a broker of the
		// service's own. This service only calls, so its server never
		// starts.
		micro.Server(server.NewServer(server.Address("127.0.0.1:0"))),
		micro.Client(client.NewClient()),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Name("greeter.client"),
		gomicro.Registry(reg, cache.WithTTL(cfg.ttl)), // in place of micro.Registry(reg)
	)
	sel := service.Client().Options().Selector.(cache.Selector)
	// A service that runs stops the selector's cache when it stops; this
	// one never runs.
	defer sel.Close()

	// The status page and the metrics of the cache that the client's
	// selector reads, and of the selector.
	http.Handle("/debug/regcache", admin.Handler(sel.Cache(), sel))
	prometheus.MustRegister(regcacheprometheus.NewCollector(sel.Cache(), regcacheprometheus.WithSelectors(sel)))
	http.Handle("/metrics", promhttp.Handler())

	ln, err := net.Listen("tcp", cfg.http)
	if err != nil {
		return fmt.Errorf("%w (-http chooses another address)", err)
	}
	hs := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	defer func() {
		hs.Close()
		<-served
	}()
	fmt.Fprintf(out, "client: status page http://%s/debug/regcache\n", ln.Addr())
	fmt.Fprintf(out, "client: metrics     http://%s/metrics\n", ln.Addr())

	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
	for {
		greeting, err := hello(ctx, service.Client(), "regcache")
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintf(out, "%s call failed: %v\n", time.Now().Format(time.TimeOnly), err)
		default:
			fmt.Fprintf(out, "%s %s\n", time.Now().Format(time.TimeOnly), greeting)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// hello calls Greeter.Hello once.
func hello(ctx context.Context, cl client.Client, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var rsp Response
	if err := cl.Call(ctx, cl.NewRequest("greeter", "Greeter.Hello", &Request{Name: name}), &rsp); err != nil {
		return "", err
	}
	if rsp.Greeting == "" {
		return "", errors.New("empty answer")
	}
	return rsp.Greeting, nil
}
