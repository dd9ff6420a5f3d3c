// Package regcacheprometheus exports a regcache Cache, and the passive
// health of the selectors that read it, to Prometheus, with the metric
// names of docs/metrics.md. One line registers it:
//
//	prometheus.MustRegister(regcacheprometheus.NewCollector(c, regcacheprometheus.WithSelectors(sel)))
//
// It is a module of its own, so that the cache does not depend on
// client_golang.
//
// A scrape reads the cache's counters (Cache.Stats), whose cost does not
// grow with the number of services. The series of each service are off by
// default, since a gateway may hold 100 000 services: WithServiceMetrics
// adds them, paging through Cache.Services a thousand rows at a time.
//
// No label is named after a label that Prometheus or its Operator gives a
// target (job, instance, service, namespace, pod, container, endpoint), so
// none is renamed exported_*: the service a series describes is in the
// regcache_service label.
package regcacheprometheus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go-micro.dev/v4/selector"

	cache "github.com/regcache/cache"
)

// servicesPage is how many rows a scrape asks Cache.Services for at a
// time, with WithServiceMetrics.
const servicesPage = 1000

// Collector is a prometheus.Collector of one Cache and of the selectors
// that read it. It holds no state: each scrape reads the cache and the
// selectors, so scrapes may run at once.
type Collector struct {
	c          cache.Cache
	selectors  []cache.Selector
	perService bool
}

var _ prometheus.Collector = (*Collector)(nil)

// An Option configures a Collector.
type Option func(*Collector)

// WithSelectors adds the passive health of selectors that read the cache
// (made by cache.NewSelector, or the client's selector after
// gomicro.Registry), added up over them: failures, ejections and the nodes
// ejected now. A selector that does not report it (not one of
// cache.NewSelector's) is left out, as the status page shows it as not
// reporting. Give each selector once. A nil selector panics.
func WithSelectors(selectors ...selector.Selector) Option {
	for i, s := range selectors {
		if s == nil {
			panic(fmt.Sprintf("regcacheprometheus: WithSelectors: selector %d must not be nil", i+1))
		}
	}
	return func(col *Collector) {
		for _, s := range selectors {
			if s, ok := s.(cache.Selector); ok {
				col.selectors = append(col.selectors, s)
			}
		}
	}
}

// WithServiceMetrics adds the series of each service that has data
// (regcache_service_*{regcache_service="..."}): five series a service. A
// scrape then pages through Cache.Services, a thousand rows a call, each
// call a walk of the names: keep it for caches of a few thousand services.
// A scrape reads at most one page more than the services held when it
// began, so that names that keep coming cannot hold it.
func WithServiceMetrics() Option {
	return func(col *Collector) { col.perService = true }
}

// NewCollector returns the collector of c. It panics if c is nil.
func NewCollector(c cache.Cache, opts ...Option) *Collector {
	if c == nil {
		panic("regcacheprometheus: NewCollector: cache must not be nil")
	}
	col := &Collector{c: c}
	for _, opt := range opts {
		if opt == nil {
			panic("regcacheprometheus: NewCollector: nil Option")
		}
		opt(col)
	}
	return col
}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// serviceLabel names the service of a per-service series. Not "service":
// the Prometheus Operator gives every target a service label, which would
// move ours to exported_service.
const serviceLabel = "regcache_service"

var (
	descLookups       = newDesc("regcache_lookups_total", "GetService and Lookup calls, by result: fresh, event (nodes an event announced, not yet confirmed), stale, throttled (an error without a registry call: throttled, too stale, or a not-found answer held for its retry window), miss (waited for a registry call) or invalid (the empty name).", "result")
	descRefreshes     = newDesc("regcache_refreshes_total", "Registry calls made to refresh a service.")
	descRefreshErrors = newDesc("regcache_refresh_errors_total", "Registry calls that failed; a not-found answer is not a failure.")
	descLists         = newDesc("regcache_lists_total", "ListServices calls, one per re-validation of many services at once.")
	descDown          = newDesc("regcache_registry_down", "1 while the cache holds the registry to be down and sends it only probes.")
	descOutages       = newDesc("regcache_registry_outages_total", "Times the cache held the registry to be down, the current outage included.")
	descDownTime      = newDesc("regcache_registry_down_time_seconds_total", "Time the cache held the registry to be down, the current outage included, up to now.")
	descStream        = newDesc("regcache_watch_stream_state", "State of the watch stream: 1 for the current state, 0 for the others.", "state")
	descWatchEvents   = newDesc("regcache_watch_events_total", "Watch events: applied to a cached service, ignored (service not cached) or invalidating (could not be applied; the entry turned stale).", "result")
	descReconnects    = newDesc("regcache_watch_reconnects_total", "Watch streams established after the first.")
	descObsDropped    = newDesc("regcache_observer_dropped_total", "Observer events dropped: the observer's queue was full, or the cache was stopped.")
	descEntries       = newDesc("regcache_entries", "Services the cache holds state for, with or without data.")
	descStaleAge      = newDesc("regcache_stale_served_age_seconds", "How stale the data being served is: the age, since the registry last told its nodes, of the oldest stale data served and still held; 0 when none is.")

	cacheDescs = []*prometheus.Desc{
		descLookups, descRefreshes, descRefreshErrors, descLists, descDown, descOutages, descDownTime,
		descStream, descWatchEvents, descReconnects, descObsDropped, descEntries, descStaleAge,
	}

	descServiceNodes     = newDesc("regcache_service_nodes", "Nodes cached for a service, over all its versions.", serviceLabel)
	descServiceFresh     = newDesc("regcache_service_fresh", "1 while a service's data is fresh, 0 once its TTL has run out.", serviceLabel)
	descServiceAge       = newDesc("regcache_service_age_seconds", "Time since the registry last told a service's nodes, by a refresh or an event.", serviceLabel)
	descServiceFailures  = newDesc("regcache_service_refresh_failures", "Consecutive failed refreshes of a service.", serviceLabel)
	descServiceLastKnown = newDesc("regcache_service_last_known_nodes", "1 while WithLastKnownNodes keeps a service's nodes after the registry showed none.", serviceLabel)

	serviceDescs = []*prometheus.Desc{
		descServiceNodes, descServiceFresh, descServiceAge, descServiceFailures, descServiceLastKnown,
	}

	descSelFailures   = newDesc("regcache_selector_failures_total", "Attempts reported to the selectors that could not reach their node: connection errors, broken connections, timeouts.")
	descSelEjections  = newDesc("regcache_selector_ejections_total", "Nodes of cached service lists ejected by the selectors' passive health.")
	descSelRefused    = newDesc("regcache_selector_refused_total", "Failing nodes kept in rotation because their service had its maximum share of nodes ejected.")
	descSelReadmitted = newDesc("regcache_selector_readmitted_total", "Ejected nodes reached again after their ejection ended.")
	descSelIgnored    = newDesc("regcache_selector_ignored_total", "Picks that handed out an ejected node because every node the caller could pick was ejected.")
	descSelEjected    = newDesc("regcache_selector_ejected_nodes", "Nodes the selectors hold ejected now.")

	selectorDescs = []*prometheus.Desc{
		descSelFailures, descSelEjections, descSelRefused, descSelReadmitted, descSelIgnored, descSelEjected,
	}
)

// streamStates are the values of the state label, each with the state of
// Stats.Stream it stands for.
var streamStates = []struct {
	state cache.StreamState
	label string
}{
	{cache.StreamNotStarted, "not_started"},
	{cache.StreamConnected, "connected"},
	{cache.StreamReconnecting, "reconnecting"},
	{cache.StreamStopped, "stopped"},
}

// Describe sends the descriptions of the metrics that Collect sends.
func (col *Collector) Describe(ch chan<- *prometheus.Desc) {
	send := func(descs []*prometheus.Desc) {
		for _, d := range descs {
			ch <- d
		}
	}
	send(cacheDescs)
	if col.perService {
		send(serviceDescs)
	}
	if len(col.selectors) > 0 {
		send(selectorDescs)
	}
}

// Collect sends the cache's counters and state, the selectors' figures,
// and, with WithServiceMetrics, each service's series.
func (col *Collector) Collect(ch chan<- prometheus.Metric) {
	st := col.c.Stats()
	counter(ch, descLookups, st.FreshHits, "fresh")
	counter(ch, descLookups, st.EventServes, "event")
	counter(ch, descLookups, st.StaleServes, "stale")
	counter(ch, descLookups, st.Throttled, "throttled")
	counter(ch, descLookups, st.Misses, "miss")
	counter(ch, descLookups, st.Invalid, "invalid")
	counter(ch, descRefreshes, st.Refreshes)
	counter(ch, descRefreshErrors, st.RefreshErrors)
	counter(ch, descLists, st.Lists)
	gauge(ch, descDown, flag(st.RegistryDown))
	counter(ch, descOutages, st.Outages)
	ch <- prometheus.MustNewConstMetric(descDownTime, prometheus.CounterValue, st.DownTime.Seconds())
	for _, s := range streamStates {
		gauge(ch, descStream, flag(st.Stream == s.state), s.label)
	}
	counter(ch, descWatchEvents, st.EventsApplied, "applied")
	counter(ch, descWatchEvents, st.EventsIgnored, "ignored")
	counter(ch, descWatchEvents, st.EventsInvalidating, "invalidating")
	counter(ch, descReconnects, st.WatchReconnects)
	counter(ch, descObsDropped, st.ObserverDropped)
	gauge(ch, descEntries, float64(st.Entries))
	gauge(ch, descStaleAge, st.StaleServedAge.Seconds())

	if len(col.selectors) > 0 {
		var sum cache.SelectorStats
		ejected := 0
		for _, s := range col.selectors {
			ss := s.Stats()
			sum.Failures += ss.Failures
			sum.Ejections += ss.Ejections
			sum.Refused += ss.Refused
			sum.Readmitted += ss.Readmitted
			sum.Ignored += ss.Ignored
			ejected += len(ss.Ejected)
		}
		counter(ch, descSelFailures, sum.Failures)
		counter(ch, descSelEjections, sum.Ejections)
		counter(ch, descSelRefused, sum.Refused)
		counter(ch, descSelReadmitted, sum.Readmitted)
		counter(ch, descSelIgnored, sum.Ignored)
		gauge(ch, descSelEjected, float64(ejected))
	}

	if col.perService {
		eachService(col.c, st.Entries, func(svc cache.ServiceStats) {
			gauge(ch, descServiceNodes, float64(svc.Nodes), svc.Name)
			gauge(ch, descServiceFresh, flag(svc.Fresh), svc.Name)
			gauge(ch, descServiceAge, svc.Age.Seconds(), svc.Name)
			gauge(ch, descServiceFailures, float64(svc.Failures), svc.Name)
			gauge(ch, descServiceLastKnown, flag(svc.LastKnownNodes), svc.Name)
		})
	}
}

// eachService calls fn for each service of c that has data, by name,
// reading servicesPage rows a call, and at most one page more than the
// entries held, so that names that keep coming after the last page read
// cannot hold a scrape.
func eachService(c cache.Cache, entries int, fn func(cache.ServiceStats)) {
	after := ""
	for pages := entries/servicesPage + 1; pages > 0; pages-- {
		rows := c.Services("", after, servicesPage)
		for _, svc := range rows {
			if svc.Source != "" { // without, a name held without data
				fn(svc)
			}
		}
		if len(rows) < servicesPage {
			return
		}
		after = rows[len(rows)-1].Name
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
