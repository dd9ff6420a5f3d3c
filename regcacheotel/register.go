// Package regcacheotel registers a regcache Cache, and the passive health
// of the selectors that read it, as asynchronous instruments of an
// OpenTelemetry meter, with the names of docs/metrics.md. One call
// registers them, on the global meter provider unless WithMeterProvider
// names another:
//
//	reg, err := regcacheotel.Register(c, regcacheotel.WithSelectors(sel))
//
// reg.Unregister() stops the observations. The meter is named by this
// package's import path. It is a module of its own, so that the cache
// does not depend on OpenTelemetry.
//
// A collection reads the cache's counters (Cache.Stats), whose cost does
// not grow with the number of services. The data points of each service
// are off by default, since a gateway may hold 100 000 services:
// WithServiceMetrics adds them, paging through Cache.Services a thousand
// rows at a time.
package regcacheotel

import (
	"context"
	"errors"
	"fmt"

	"go-micro.dev/v4/selector"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cache "github.com/regcache/cache"
)

// ScopeName is the name of the meter, this package's import path.
const ScopeName = "github.com/regcache/cache/regcacheotel"

// servicesPage is how many rows a collection asks Cache.Services for at a
// time, with WithServiceMetrics.
const servicesPage = 1000

type config struct {
	provider   metric.MeterProvider
	selectors  []cache.Selector
	perService bool
}

// An Option configures Register.
type Option func(*config)

// WithMeterProvider registers the instruments on a meter of provider
// rather than of the global meter provider, otel.GetMeterProvider(). A nil
// provider panics.
func WithMeterProvider(provider metric.MeterProvider) Option {
	if provider == nil {
		panic("regcacheotel: WithMeterProvider: provider must not be nil")
	}
	return func(cfg *config) { cfg.provider = provider }
}

// WithSelectors adds the passive health of selectors that read the cache
// (made by cache.NewSelector, or the client's selector after
// gomicro.Registry), added up over them: failures, ejections and the nodes
// ejected now. A selector that does not report it (not one of
// cache.NewSelector's) is left out, as the status page shows it as not
// reporting. Give each selector once. A nil selector panics.
func WithSelectors(selectors ...selector.Selector) Option {
	for i, s := range selectors {
		if s == nil {
			panic(fmt.Sprintf("regcacheotel: WithSelectors: selector %d must not be nil", i+1))
		}
	}
	return func(cfg *config) {
		for _, s := range selectors {
			if s, ok := s.(cache.Selector); ok {
				cfg.selectors = append(cfg.selectors, s)
			}
		}
	}
}

// WithServiceMetrics adds the data points of each service that has data
// (regcache.service.*, with a regcache.service attribute): five a service. A
// collection then pages through Cache.Services, a thousand rows a call,
// each call a walk of the names: keep it for caches of a few thousand
// services. A collection reads at most one page more than the services
// held when it began, so that names that keep coming cannot hold it.
func WithServiceMetrics() Option {
	return func(cfg *config) { cfg.perService = true }
}

// Register creates regcache's instruments on the meter named ScopeName of
// the global meter provider (or WithMeterProvider's), and registers one
// callback that observes c, and the selectors, at each collection. The
// returned registration's Unregister ends the observations: call it when
// the cache goes away. It panics if c is nil.
func Register(c cache.Cache, opts ...Option) (metric.Registration, error) {
	if c == nil {
		panic("regcacheotel: Register: cache must not be nil")
	}
	var cfg config
	for _, opt := range opts {
		if opt == nil {
			panic("regcacheotel: Register: nil Option")
		}
		opt(&cfg)
	}
	if cfg.provider == nil {
		cfg.provider = otel.GetMeterProvider()
	}
	meter := cfg.provider.Meter(ScopeName)
	in := &instruments{meter: meter}
	in.cacheInstruments()
	if len(cfg.selectors) > 0 {
		in.selectorInstruments()
	}
	if cfg.perService {
		in.serviceInstruments()
	}
	if err := errors.Join(in.errs...); err != nil {
		return nil, fmt.Errorf("regcacheotel: %w", err)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := c.Stats()
		in.observeCache(o, st)
		if len(cfg.selectors) > 0 {
			in.observeSelectors(o, cfg.selectors)
		}
		if cfg.perService {
			in.observeServices(o, c, st.Entries)
		}
		return nil
	}, in.all...)
	if err != nil {
		return nil, fmt.Errorf("regcacheotel: %w", err)
	}
	return reg, nil
}

// instruments are the instruments Register made, and the errors making
// them.
type instruments struct {
	meter metric.Meter
	all   []metric.Observable
	errs  []error

	lookups, refreshes, refreshErrors, lists, outages, watchEvents, reconnects, dropped metric.Int64ObservableCounter
	downTime                                                                            metric.Float64ObservableCounter
	down, stream, entries                                                               metric.Int64ObservableGauge
	staleAge                                                                            metric.Float64ObservableGauge

	selFailures, selEjections, selRefused, selReadmitted, selIgnored metric.Int64ObservableCounter
	selEjected                                                       metric.Int64ObservableGauge

	nodes, fresh, failures, lastKnown metric.Int64ObservableGauge
	age                               metric.Float64ObservableGauge
}

func (in *instruments) counter(name, unit, desc string) metric.Int64ObservableCounter {
	inst, err := in.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	in.all = append(in.all, inst)
	return inst
}

func (in *instruments) gauge(name, unit, desc string) metric.Int64ObservableGauge {
	inst, err := in.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	in.all = append(in.all, inst)
	return inst
}

func (in *instruments) secondsCounter(name, desc string) metric.Float64ObservableCounter {
	inst, err := in.meter.Float64ObservableCounter(name, metric.WithUnit("s"), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	in.all = append(in.all, inst)
	return inst
}

func (in *instruments) seconds(name, desc string) metric.Float64ObservableGauge {
	inst, err := in.meter.Float64ObservableGauge(name, metric.WithUnit("s"), metric.WithDescription(desc))
	in.errs = append(in.errs, err)
	in.all = append(in.all, inst)
	return inst
}

// The descriptions are the help texts of the Prometheus collector, and of
// docs/metrics.md. The 0-or-1 gauges have no unit, which keeps a _ratio
// suffix off their Prometheus names.
func (in *instruments) cacheInstruments() {
	in.lookups = in.counter("regcache.lookups", "{lookup}", "GetService and Lookup calls, by result: fresh, event (nodes an event announced, not yet confirmed), stale, throttled (an error without a registry call: throttled, too stale, or a not-found answer held for its retry window), miss (waited for a registry call) or invalid (the empty name).")
	in.refreshes = in.counter("regcache.refreshes", "{call}", "Registry calls made to refresh a service.")
	in.refreshErrors = in.counter("regcache.refresh_errors", "{call}", "Registry calls that failed; a not-found answer is not a failure.")
	in.lists = in.counter("regcache.lists", "{call}", "ListServices calls, one per re-validation of many services at once.")
	in.down = in.gauge("regcache.registry.down", "", "1 while the cache holds the registry to be down and sends it only probes.")
	in.outages = in.counter("regcache.registry.outages", "{outage}", "Times the cache held the registry to be down, the current outage included.")
	in.downTime = in.secondsCounter("regcache.registry.down_time", "Time the cache held the registry to be down, the current outage included, up to now.")
	in.stream = in.gauge("regcache.watch.stream.state", "", "State of the watch stream: 1 for the current state, 0 for the others.")
	in.watchEvents = in.counter("regcache.watch.events", "{event}", "Watch events: applied to a cached service, ignored (service not cached) or invalidating (could not be applied; the entry turned stale).")
	in.reconnects = in.counter("regcache.watch.reconnects", "{reconnect}", "Watch streams established after the first.")
	in.dropped = in.counter("regcache.observer.dropped", "{event}", "Observer events dropped: the observer's queue was full, or the cache was stopped.")
	in.entries = in.gauge("regcache.entries", "{service}", "Services the cache holds state for, with or without data.")
	in.staleAge = in.seconds("regcache.stale_served.age", "How stale the data being served is: the age, since the registry last told its nodes, of the oldest stale data served and still held; 0 when none is.")
}

func (in *instruments) selectorInstruments() {
	in.selFailures = in.counter("regcache.selector.failures", "{attempt}", "Attempts reported to the selectors that could not reach their node: connection errors, broken connections, timeouts.")
	in.selEjections = in.counter("regcache.selector.ejections", "{ejection}", "Nodes of cached service lists ejected by the selectors' passive health.")
	in.selRefused = in.counter("regcache.selector.refused", "{node}", "Failing nodes kept in rotation because their service had its maximum share of nodes ejected.")
	in.selReadmitted = in.counter("regcache.selector.readmitted", "{node}", "Ejected nodes reached again after their ejection ended.")
	in.selIgnored = in.counter("regcache.selector.ignored", "{pick}", "Picks that handed out an ejected node because every node the caller could pick was ejected.")
	in.selEjected = in.gauge("regcache.selector.ejected_nodes", "{node}", "Nodes the selectors hold ejected now.")
}

func (in *instruments) serviceInstruments() {
	in.nodes = in.gauge("regcache.service.nodes", "{node}", "Nodes cached for a service, over all its versions.")
	in.fresh = in.gauge("regcache.service.fresh", "", "1 while a service's data is fresh, 0 once its TTL has run out.")
	in.age = in.seconds("regcache.service.age", "Time since the registry last told a service's nodes, by a refresh or an event.")
	in.failures = in.gauge("regcache.service.refresh_failures", "{failure}", "Consecutive failed refreshes of a service.")
	in.lastKnown = in.gauge("regcache.service.last_known_nodes", "", "1 while WithLastKnownNodes keeps a service's nodes after the registry showed none.")
}

func (in *instruments) observeCache(o metric.Observer, st cache.Stats) {
	o.ObserveInt64(in.lookups, int64(st.FreshHits), resultFresh)
	o.ObserveInt64(in.lookups, int64(st.EventServes), resultEvent)
	o.ObserveInt64(in.lookups, int64(st.StaleServes), resultStale)
	o.ObserveInt64(in.lookups, int64(st.Throttled), resultThrottled)
	o.ObserveInt64(in.lookups, int64(st.Misses), resultMiss)
	o.ObserveInt64(in.lookups, int64(st.Invalid), resultInvalid)
	o.ObserveInt64(in.refreshes, int64(st.Refreshes))
	o.ObserveInt64(in.refreshErrors, int64(st.RefreshErrors))
	o.ObserveInt64(in.lists, int64(st.Lists))
	o.ObserveInt64(in.down, flag(st.RegistryDown))
	o.ObserveInt64(in.outages, int64(st.Outages))
	o.ObserveFloat64(in.downTime, st.DownTime.Seconds())
	for _, s := range streamStates {
		o.ObserveInt64(in.stream, flag(st.Stream == s.state), s.attr)
	}
	o.ObserveInt64(in.watchEvents, int64(st.EventsApplied), resultApplied)
	o.ObserveInt64(in.watchEvents, int64(st.EventsIgnored), resultIgnored)
	o.ObserveInt64(in.watchEvents, int64(st.EventsInvalidating), resultInvalidating)
	o.ObserveInt64(in.reconnects, int64(st.WatchReconnects))
	o.ObserveInt64(in.dropped, int64(st.ObserverDropped))
	o.ObserveInt64(in.entries, int64(st.Entries))
	o.ObserveFloat64(in.staleAge, st.StaleServedAge.Seconds())
}

func result(r string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("result", r))
}

var (
	resultFresh, resultEvent, resultStale            = result("fresh"), result("event"), result("stale")
	resultThrottled, resultMiss, resultInvalid       = result("throttled"), result("miss"), result("invalid")
	resultApplied, resultIgnored, resultInvalidating = result("applied"), result("ignored"), result("invalidating")
)

// streamStates are the values of the state attribute, each with the state
// of Stats.Stream it stands for.
var streamStates = []struct {
	state cache.StreamState
	attr  metric.MeasurementOption
}{
	{cache.StreamNotStarted, metric.WithAttributes(attribute.String("state", "not_started"))},
	{cache.StreamConnected, metric.WithAttributes(attribute.String("state", "connected"))},
	{cache.StreamReconnecting, metric.WithAttributes(attribute.String("state", "reconnecting"))},
	{cache.StreamStopped, metric.WithAttributes(attribute.String("state", "stopped"))},
}

func (in *instruments) observeSelectors(o metric.Observer, selectors []cache.Selector) {
	var sum cache.SelectorStats
	ejected := 0
	for _, s := range selectors {
		ss := s.Stats()
		sum.Failures += ss.Failures
		sum.Ejections += ss.Ejections
		sum.Refused += ss.Refused
		sum.Readmitted += ss.Readmitted
		sum.Ignored += ss.Ignored
		ejected += len(ss.Ejected)
	}
	o.ObserveInt64(in.selFailures, int64(sum.Failures))
	o.ObserveInt64(in.selEjections, int64(sum.Ejections))
	o.ObserveInt64(in.selRefused, int64(sum.Refused))
	o.ObserveInt64(in.selReadmitted, int64(sum.Readmitted))
	o.ObserveInt64(in.selIgnored, int64(sum.Ignored))
	o.ObserveInt64(in.selEjected, int64(ejected))
}

// observeServices observes each service of c that has data, by name,
// reading servicesPage rows a call, and at most one page more than the
// entries held, so that names that keep coming after the last page read
// cannot hold a collection.
func (in *instruments) observeServices(o metric.Observer, c cache.Cache, entries int) {
	after := ""
	for pages := entries/servicesPage + 1; pages > 0; pages-- {
		rows := c.Services("", after, servicesPage)
		for _, s := range rows {
			if s.Source == "" {
				continue // a name held without data
			}
			svc := metric.WithAttributes(attribute.String(serviceAttr, s.Name))
			o.ObserveInt64(in.nodes, int64(s.Nodes), svc)
			o.ObserveInt64(in.fresh, flag(s.Fresh), svc)
			o.ObserveFloat64(in.age, s.Age.Seconds(), svc)
			o.ObserveInt64(in.failures, int64(s.Failures), svc)
			o.ObserveInt64(in.lastKnown, flag(s.LastKnownNodes), svc)
		}
		if len(rows) < servicesPage {
			return
		}
		after = rows[len(rows)-1].Name
	}
}

// serviceAttr names the service of a per-service data point. Not
// "service": through OpenTelemetry's Prometheus exporter it would become
// the service label, which the Prometheus Operator gives every target and
// which would move ours to exported_service.
const serviceAttr = "regcache.service"

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
