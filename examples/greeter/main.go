// Command greeter is a go-micro service and a client that calls it, on
// etcd, with regcache between the client and etcd, and regcache's status
// page and Prometheus metrics served by the client:
//
//	go run ./greeter                            etcd, the service and the client, in one process
//	go run ./greeter -mode server               etcd and the service
//	go run ./greeter -mode client -etcd ADDR    the client
//
// Without -etcd (or MICRO_REGISTRY_ADDRESS), the program starts an etcd of
// its own, on loopback ports, with its data in a temporary directory that
// it removes when it ends; press Enter to stop that etcd, and Enter again
// to start it. The service and the client listen on loopback only.
//
// server.go holds the service, client.go the client and its wiring of
// regcache; this file reads the flags and starts them.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go-micro.dev/v4/registry"
	"golang.org/x/sync/errgroup"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/etcd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
}

// config is what the flags set.
type config struct {
	mode  string        // all, server or client
	etcd  string        // etcd's address; "" for an etcd of the program's own
	http  string        // where the client serves the status page and the metrics
	every time.Duration // between two calls of the client
	ttl   time.Duration // how long the client's cache holds what etcd said as fresh
}

// errUsage is the error of a command line that parseFlags has explained.
var errUsage = errors.New("usage")

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{mode: "all", etcd: os.Getenv("MICRO_REGISTRY_ADDRESS"), http: "127.0.0.1:8080", every: time.Second, ttl: cache.DefaultTTL}
	fs := flag.NewFlagSet("greeter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.mode, "mode", cfg.mode, "what to run: all (the service and the client), server or client")
	fs.StringVar(&cfg.etcd, "etcd", cfg.etcd, "etcd's address, host:port (default $MICRO_REGISTRY_ADDRESS; none: start an etcd in the program)")
	fs.StringVar(&cfg.http, "http", cfg.http, "where the client serves regcache's status page and metrics")
	fs.DurationVar(&cfg.every, "every", cfg.every, "how often the client calls the service")
	fs.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "how long the client's cache holds what etcd said as fresh (cache.WithTTL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errUsage // the flag package has said why
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.mode != "all" && cfg.mode != "server" && cfg.mode != "client":
		err = fmt.Errorf("-mode must be all, server or client, got %q", cfg.mode)
	case cfg.mode == "client" && cfg.etcd == "":
		err = errors.New("-mode client needs -etcd: the address that the server printed, or your etcd's")
	case cfg.every <= 0:
		err = fmt.Errorf("-every must be positive, got %v", cfg.every)
	case cfg.ttl <= 0:
		err = fmt.Errorf("-ttl must be positive, got %v", cfg.ttl)
	}
	if err != nil {
		fmt.Fprintf(stderr, "greeter: %v (see -h)\n", err)
		return cfg, errUsage
	}
	return cfg, nil
}

// run runs what the flags in args ask for until ctx ends. It writes what
// a user reads to stdout, and reads Enter from stdin to stop and start the
// etcd it started.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	addr := cfg.etcd
	if addr == "" {
		own, err := startEmbeddedEtcd()
		if err != nil {
			return err
		}
		defer own.Close()
		addr = own.Addr()
		fmt.Fprintf(stdout, "etcd: started in this program on %s (data in %s)\n", addr, own.Dir())
		fmt.Fprintln(stdout, "etcd: press Enter to stop it, and Enter again to start it")
		if cfg.mode == "server" {
			fmt.Fprintf(stdout, "etcd: run the client with: go run ./greeter -mode client -etcd %s\n", addr)
		}
		go stopAndStartOnEnter(stdin, own, stdout)
	}

	g, ctx := errgroup.WithContext(ctx)
	// In one process, the client starts once the service is registered,
	// so that its first call finds it.
	serving := make(chan struct{})
	if cfg.mode != "client" {
		g.Go(func() error {
			return runServer(ctx, etcd.NewRegistry(registry.Addrs(addr)), func(a string) {
				fmt.Fprintf(stdout, "server: greeter on %s, registered in etcd at %s\n", a, addr)
				close(serving)
			})
		})
	} else {
		close(serving)
	}
	if cfg.mode != "server" {
		g.Go(func() error {
			select {
			case <-serving:
			case <-ctx.Done():
				return nil
			}
			return runClient(ctx, etcd.NewRegistry(registry.Addrs(addr)), cfg, stdout)
		})
	}
	return g.Wait()
}

// stopAndStartOnEnter stops etcd at each line of in while it runs, and
// starts it at each line while it is stopped, until in ends.
func stopAndStartOnEnter(in io.Reader, e *embeddedEtcd, out io.Writer) {
	for lines := bufio.NewScanner(in); lines.Scan(); {
		if e.Running() {
			e.Stop()
			fmt.Fprintln(out, "etcd: stopped; the client goes on from its cache (Enter starts etcd again)")
			continue
		}
		if err := e.Start(); err != nil {
			fmt.Fprintln(out, "etcd:", err)
			return
		}
		fmt.Fprintln(out, "etcd: started again")
	}
}
