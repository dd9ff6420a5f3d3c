// Package gomicro puts regcache into a go-micro service in one line:
//
//	service := micro.NewService(
//		micro.Name("greeter"),
//		gomicro.Registry(reg), // in place of micro.Registry(reg)
//	)
//	service.Init()
//
// Registry is micro.Registry with regcache between the service's client and
// the registry. The client selects nodes through cache.NewSelector over a
// cache of the registry: one watch stream for every service the client
// calls, stale data served while the registry is down, and passive health
// that keeps the client away from nodes it cannot reach. The server
// registers in the registry itself, as with micro.Registry.
//
// A call whose first attempt could not open a connection (refused, no
// route, the dial timed out) is tried again, once: its request was never
// written, so no server received it, and a node that refused is ejected
// before the retry picks another. Every other outcome is left to the
// retry policy that the client had: go-micro's client.RetryOnError, or one
// given with client.Retry before this option.
//
// The wiring survives service.Init and its flags. When --registry or
// MICRO_REGISTRY names the registry already given, nothing changes; when it
// names another one, the service uses that one, as go-micro intends, and
// regcache caches it instead. go-micro's global selector.DefaultSelector is
// never touched.
//
// Metrics and the status page read the same cache, through the client's
// selector, in one line each (see Registry); selector options go in with
// cache.WithSelectorOptions. Importing this package also makes
// --selector=regcache and MICRO_SELECTOR=regcache choose regcache's selector
// in a service wired with micro.Registry.
//
// To tell it is working: the client's selector is named "regcache"
// (service.Client().Options().Selector.String()), its Stats method shows the
// cache's lookups and the nodes ejected (see cache.SelectorStats), and the
// service's logger says "regcache: the client selects nodes through regcache
// over the <name> registry" when the option is applied.
package gomicro

import (
	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/selector"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/util/cmd"

	cache "github.com/regcache/cache"
)

// init makes regcache a selector that --selector and MICRO_SELECTOR can
// choose, as importing a registry's package makes that registry one.
func init() {
	cmd.DefaultSelectors["regcache"] = newFlagSelector
}

// newFlagSelector is the selector that --selector=regcache makes, over the
// registry that opts give (go-micro's command gives the service's), or
// go-micro's default registry. go-micro's command never closes a selector,
// so its cache runs for the life of the process.
func newFlagSelector(opts ...selector.Option) selector.Selector {
	var o selector.Options
	for _, opt := range opts {
		opt(&o)
	}
	r := o.Registry
	if r == nil {
		r = registry.DefaultRegistry
	}
	log := o.Logger
	if log == nil {
		log = logger.DefaultLogger
	}
	s := newFollowSelector(r, nil, log)
	if err := s.Init(opts...); err != nil {
		logf(log, logger.ErrorLevel, "regcache: --selector=regcache: %v", err)
	}
	return s
}

// Registry returns a micro.Option to use in place of micro.Registry(r). It
// sets r as the registry of the service, its server and its broker, as
// micro.Registry does, and gives the service's client a selector that reads
// a cache of r, made with opts. Give it once, after micro.Client,
// micro.Server and micro.Cmd if you use them: like micro.Registry, it
// configures the client, server and command in place when it is applied.
//
// The client's retry policy becomes one that retries, once per call, a
// first attempt that could not open a connection, and hands every other
// outcome to the policy the client had (see the package documentation).
// It uses one of the client's retries; client.Retries(0) turns it off, and
// a client.Retry given after this option replaces it.
//
// The selector owns its cache: the service stops it after it stops
// (micro.AfterStop), and so does the selector's Close. Selector options
// go in through cache.WithSelectorOptions, for example
// gomicro.Registry(reg, cache.WithSelectorOptions(cache.WithEjectAfter(5))).
// The client's selector is a cache.Selector, whose Cache method hands a
// metrics exporter or a status page the cache it reads:
//
//	sel := service.Client().Options().Selector.(cache.Selector)
//	http.Handle("/debug/regcache/", admin.Handler(sel.Cache(), sel))
//
// That Cache follows the registry that flags choose in service.Init.
//
// When r is itself a Cache of regcache's, the client's selector reads it
// as it is, and of opts only the selector options apply.
//
// Registry panics if r is nil; the option panics, as cache.New does, if
// opts are invalid (cache.Validate tells beforehand).
func Registry(r registry.Registry, opts ...cache.Option) micro.Option {
	if r == nil {
		panic("regcache/gomicro: Registry: registry must not be nil")
	}
	return func(o *micro.Options) {
		log := o.Logger
		if log == nil {
			log = logger.DefaultLogger
		}
		sel := newFollowSelector(r, opts, log)
		// The selector goes in first: client.Registry initialises the
		// selector that the client holds at that moment, and that must
		// not be go-micro's global one.
		_ = o.Client.Init(client.Selector(sel))
		installRetry(o.Client)
		o.Registry = r
		_ = o.Client.Init(client.Registry(r))
		_ = o.Server.Init(server.Registry(r))
		_ = o.Broker.Init(broker.Registry(r))
		if o.Cmd != nil {
			o.Cmd = &flagsCmd{Cmd: o.Cmd, sel: sel, log: log}
		}
		o.AfterStop = append(o.AfterStop, sel.Close)
		logf(log, logger.InfoLevel, "regcache: the client selects nodes through regcache over the %s registry", r.String())
	}
}

// flagsCmd is the service's command with regcache's selector kept in place
// through flag parsing. go-micro's command acts on flags and environment
// variables in service.Init: when --registry names a registry other than the
// service's, it makes that registry, hands it to the selector it knows of,
// and gives that selector to the client. By default that is go-micro's
// global selector.DefaultSelector; flagsCmd makes it regcache's, so the
// client keeps it and the global one is left alone.
type flagsCmd struct {
	cmd.Cmd
	sel *followSelector
	log logger.Logger
}

// Init parses the flags with regcache's selector as the command's, then
// makes sure the service's client still uses it, unless --selector chose
// another one.
func (c *flagsCmd) Init(opts ...cmd.Option) error {
	var o cmd.Options
	for _, opt := range opts {
		opt(&o)
	}
	global := selector.DefaultSelector
	chosen := selector.Selector(c.sel)
	err := c.Cmd.Init(append(opts[:len(opts):len(opts)], cmd.Selector(&chosen))...)
	picked := chosen
	// go-micro v5's command also makes the selector it is given the
	// global one; put go-micro's back. (A selector that the flags chose
	// stays global, as go-micro v5 intends.)
	if selector.DefaultSelector == selector.Selector(c.sel) {
		selector.DefaultSelector = global
	}
	// The command keeps the pointer to chosen for later Inits of other
	// services; leave there what go-micro's own default would be.
	chosen = selector.DefaultSelector
	if picked != selector.Selector(c.sel) {
		logf(c.log, logger.WarnLevel, "regcache: the flags chose the %s selector; the client does not use regcache", picked.String())
		return err
	}
	if o.Client != nil && *o.Client != nil {
		// --client may have made a new client, with go-micro's retry
		// policy and, as some versions of go-micro's command leave it,
		// go-micro's selector.
		if (*o.Client).Options().Selector != picked {
			_ = (*o.Client).Init(client.Selector(c.sel))
		}
		installRetry(*o.Client)
	}
	return err
}

// logf writes one log line through l. Every line of this package goes
// through it: go-micro's logger names the caller two frames above its Logf
// (its CallerSkipCount of 2, set for its package function logger.Logf),
// which is then this package's code that logs, not go-micro's code that
// ran it.
func logf(l logger.Logger, level logger.Level, format string, args ...any) {
	l.Logf(level, format, args...)
}
