package storm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/transport"

	regcache "github.com/regcache/cache"
)

// The RPC clients of a plain run.
const (
	GoMicroSelector  = "go-micro selector"
	RegCacheSelector = "regcache selector"
)

// RPCClient is one way for a go-micro client to pick the node of each
// attempt: the client path measures the RPCs of a go-micro client built
// with it. Every instance gets a connection of its own to the registry,
// with the injected latency and capacity.
type RPCClient struct {
	// Name names the client in the table.
	Name string
	// Wiring says how the selector is built, for the report.
	Wiring string
	// New builds the selector over the connection reg, and how to stop it
	// and whatever it reads.
	New func(reg registry.Registry) (sel selector.Selector, stop func())
}

// DefaultRPCClients are the selectors of the client path: go-micro's
// default selector, which reads a go-micro registry/cache of its own, and
// regcache's NewSelector over a regcache. Both caches are at their
// defaults.
func DefaultRPCClients() []RPCClient {
	return []RPCClient{
		{
			Name:   GoMicroSelector,
			Wiring: "selector.NewSelector(selector.Registry(reg)): go-micro's default selector, over a go-micro registry/cache of its own (TTL 1m)",
			New: func(reg registry.Registry) (selector.Selector, func()) {
				sel := selector.NewSelector(selector.Registry(reg))
				return selectOneAtATime(sel), func() { _ = sel.Close() }
			},
		},
		RegcacheSelector(RegCacheSelector, "cache.NewSelector(cache.New(reg)): passive health at its defaults, ejection after 3 failures in a row, for 30s"),
	}
}

// RegcacheSelector is an RPC client that selects through regcache's
// NewSelector, with opts, over a regcache of the connection at its
// defaults.
func RegcacheSelector(name, wiring string, opts ...selector.Option) RPCClient {
	return RPCClient{
		Name: name, Wiring: wiring,
		New: func(reg registry.Registry) (selector.Selector, func()) {
			c := regcache.New(reg)
			sel := regcache.NewSelector(c, opts...)
			return sel, func() { _ = sel.Close(); c.Stop() }
		},
	}
}

// rpcRequestTimeout is the request timeout of both clients: the longest an
// RPC lasts, retries included. It does not scale with the timeline, which
// go-micro's backoff does not either.
const rpcRequestTimeout = time.Second

// newRPCClient is a go-micro RPC client that selects with sel and reports
// each attempt, and each Mark, to t. Both clients are built the same way:
//
//   - the HTTP transport, with a connection per attempt (PoolSize 0: with
//     go-micro v4.11.0's pool, an RPC now and then hangs under the race
//     detector);
//   - go-micro's default retry count and backoff, and retryUnreachable;
//   - a request timeout of rpcRequestTimeout;
//   - no client.Registry: it would initialise the selector it finds, and
//     the selector has its registry;
//   - a memory broker and a silent logger, given explicitly.
func newRPCClient(sel selector.Selector, t *tally) client.Client {
	return client.NewClient(
		client.Selector(&marking{Selector: sel, t: t}),
		client.Broker(broker.NewMemoryBroker()),
		client.Transport(transport.NewHTTPTransport()),
		client.PoolSize(0),
		client.Retry(retryUnreachable),
		client.RequestTimeout(rpcRequestTimeout),
		client.WrapCall(t.wrap),
		client.WithLogger(quietLogger()),
	)
}

// retryUnreachable retries an attempt that could not reach its node: a
// connection error or a timeout, which go-micro's client reports with its
// own Id. go-micro's default, client.RetryOnError, retries timeouts only, so
// a call whose node refuses the connection fails although its request was
// never sent.
func retryUnreachable(_ context.Context, _ client.Request, _ int, err error) (bool, error) {
	var e *merrors.Error
	if errors.As(err, &e) && e.Id == "go.micro.client" &&
		(e.Code == 408 || strings.HasPrefix(e.Detail, "connection error")) {
		return true, nil
	}
	return false, nil
}

// RetryPolicy says, for the report, what both clients do when an attempt
// fails.
func RetryPolicy() string {
	var waits []string
	for i := 1; i <= 3; i++ {
		d, _ := client.DefaultBackoff(context.Background(), nil, i)
		waits = append(waits, fmtDur(d))
	}
	return fmt.Sprintf("up to %d retries (go-micro's default), after go-micro's default backoff (%s, ... before the 2nd, 3rd, 4th attempt); connection errors and timeouts are retried (go-micro's default retries timeouts only); request timeout %v, retries included",
		client.DefaultRetries, strings.Join(waits, ", "), rpcRequestTimeout)
}
