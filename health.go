package cache

import (
	"time"

	log "go-micro.dev/v4/logger"
)

// DefaultProbeInterval is how often a cache sends one probe to a registry
// it holds to be down, when no WithProbeInterval option is given.
const DefaultProbeInterval = time.Second

// health is the state of the registry as a whole, next to the per-service
// throttles.
//
// A registry usually fails as a whole: a network partition, a crashed or
// overloaded server. Retrying each service on its own retry interval then
// costs one call per service per interval against a registry that cannot
// answer any of them, and logs one warning per service. So the cache holds
// one state for the registry, in the manner of a circuit breaker:
//
//   - up: refreshes go to the registry, each under its service's throttle;
//   - down: entered when two calls that were answering fail in a row with
//     no answer between them: refreshes of two different services, or the
//     watch stream lost and its redial. Only one refresh every probe
//     interval goes to the registry, as the probe; the others are refused
//     locally (stale data is served, a cold lookup gets the throttled
//     error). The probe is a real refresh that a caller or the resync
//     needs, never a synthetic call; the stream's redial, about one a probe
//     interval, probes too.
//
// Any answer (found or not) from any service, or a watch stream
// established, brings it back up. A failure of one service's key while the
// registry answers others never takes it down: the answers in between keep
// the failing service a per-service failure, throttled and logged on its
// own (once it fails twice in a row).
//
// Only a failure of a call that was answering is evidence: a key that
// failed last time and fails again tells nothing new about the registry.
// So a few broken keys take the registry down once at most, for the one
// probe interval until a healthy service answers; retrying them when it
// comes back does not take it down again, which would feed the state with
// its own recovery.
//
// A probe still out slowCall after it started no longer holds the next
// one back: it counts as failed then, and the next probe goes one probe
// interval later. Its answer, should it come, still counts.
//
// This is the half-open state of a breaker, but opened on evidence of a
// whole-registry failure and probing at a fixed pace. Google's adaptive
// client throttling would also stop most calls, but it sheds by
// probability, so during an outage the number of calls and the moment the
// recovery is noticed are both random; a registry lookup is cheap enough
// that one probe a second costs nothing, and it bounds how long the cache
// takes to notice the registry is back.
type health struct {
	// interval is the probe interval; zero turns the state off.
	interval time.Duration
	down     bool
	// since is when the failures that took the registry down began.
	since time.Time
	// suspect is the service whose failure began a streak while up, before
	// any answer or a second service's failure has classified it.
	suspect string
	// lastErr is the failure that took the registry down, or the last one.
	lastErr error
	// lastProbe is when the last probe ended, or when the registry went
	// down. probe is the probe in flight, if any.
	lastProbe time.Time
	probe     *flight
	// probes counts the probes that failed during this outage.
	probes int
	// back is when the registry last came back up: retry windows opened by
	// failures that ended before it are closed, and calls that started
	// before it cannot take the registry down again.
	back time.Time
	// failing holds the keys (services, and the suspects that stand for
	// the stream) whose last call failed, and when: their next failure is
	// no evidence. It outlives the entries, so that a broken key looked
	// up now and then counts once, and it is bounded.
	failing map[string]time.Time
	// lastAnswer is when the registry last answered anything.
	lastAnswer time.Time
	// outages counts the outages, and downTime adds up the ended ones.
	outages  uint64
	downTime time.Duration
}

const (
	// failingMemory is how long a key is remembered as failing.
	failingMemory = 10 * time.Minute
	// maxFailing bounds the keys remembered as failing; the oldest go
	// first.
	maxFailing = 256
)

// evidence reports whether a failure of key at now is evidence about the
// registry (its last call did not fail, as far as the record goes), and
// records the failure.
func (h *health) evidence(key string, now time.Time) bool {
	at, failing := h.failing[key]
	fresh := !failing || now.Sub(at) >= failingMemory
	if h.failing == nil {
		h.failing = map[string]time.Time{}
	}
	if _, ok := h.failing[key]; !ok && len(h.failing) >= maxFailing {
		oldest := ""
		for k, t := range h.failing {
			if oldest == "" || t.Before(h.failing[oldest]) {
				oldest = k
			}
		}
		delete(h.failing, oldest)
	}
	h.failing[key] = now
	return fresh
}

// cleared records that key's call was answered: its next failure is
// evidence again.
func (h *health) cleared(key string) {
	delete(h.failing, key)
}

// allows reports whether a refresh may go to the registry at now, and
// whether it is the probe.
func (h *health) allows(now time.Time) (ok, probe bool) {
	if !h.down {
		return true, false
	}
	if now.Before(h.nextProbe()) {
		return false, false
	}
	return true, true
}

// nextProbe is when a probe may next start while the registry is down: a
// probe interval after the last one ended, a probe still out counting as
// ended at its deadline.
func (h *health) nextProbe() time.Time {
	end := h.lastProbe
	if p := h.probe; p != nil {
		end = p.started.Add(slowCall)
	}
	return end.Add(h.interval)
}

// probing records that f, a probe, starts now. A probe still out past its
// deadline has failed, as far as the pace of probes goes.
func (h *health) probing(f *flight) {
	if h.probe != nil {
		h.probes++
	}
	h.probe = f
}

// probed records that f, a probe, ended at now, and reports whether it was
// the probe in flight: one overtaken by a later probe was counted already.
func (h *health) probed(f *flight, now time.Time) bool {
	if h.probe != f {
		return false
	}
	h.probe, h.lastProbe = nil, now
	return true
}

// streamSuspect and redialSuspect stand for the watch stream in a failure
// streak: a stream lost, and a Watch call failed. Two failures in a row of
// different suspects (the stream and its redial, the stream and a service,
// two services) take the registry down.
const (
	streamSuspect = "\x00stream"
	redialSuspect = "\x00redial"
)

// verdict is what an outcome changed about the registry's health.
type verdict struct {
	wentDown, wentUp bool
	// resync is set when a service that failed alone is answered again:
	// the registry may have been out without the cache noticing, and a
	// watch stream can lose what changed meanwhile without failing.
	resync bool
}

// failed records a failed call for service (or a suspect standing for the
// stream) that started at started and ended at now. Only a key whose last
// call did not fail gives evidence: a key that keeps failing is its own
// trouble, and tells nothing new about the registry.
func (h *health) failed(service string, err error, started, now time.Time) (v verdict) {
	h.lastErr = err
	evidence := h.evidence(service, now)
	switch {
	case h.interval <= 0 || h.down || !evidence:
	case started.Before(h.back):
		// A call from before the registry came back: not evidence about
		// it now.
	case h.suspect == "":
		h.suspect, h.since = service, now
	case h.suspect != service:
		// The first probe may go at once: if the guess is wrong, it
		// costs one round trip rather than a probe interval.
		h.down, h.suspect, h.lastProbe, h.probes, h.probe = true, "", now.Add(-h.interval), 0, nil
		h.outages++
		v.wentDown = true
	}
	return v
}

// answered records a refresh of service that the registry answered, found
// or not, or (with service "") a list or a watch stream established.
func (h *health) answered(service string, now time.Time) (v verdict) {
	h.cleared(service)
	h.lastAnswer = now
	if h.down {
		// A probe still out is no longer the probe: the next outage
		// starts its own.
		h.down, h.back, h.suspect, h.probe = false, now, "", nil
		h.downTime += now.Sub(h.since)
		v.wentUp = true
		return v
	}
	v.resync = h.suspect != "" && h.suspect == service
	h.suspect = ""
	return v
}

// healthLocked applies a verdict: the log line and observer event of a
// registry-wide change, and the resync when the registry comes back.
func (c *cache) healthLocked(v verdict, now time.Time, out *outbox) {
	switch {
	case v.wentDown:
		h := &c.health
		out.log(log.WarnLevel, "regcache: registry %s unreachable since %v (%v): %v; serving %d cached services from memory and refusing cold lookups, with one probe every %v until it answers",
			registryName{c.reg}, h.since.Format(time.RFC3339), now.Sub(h.since).Round(time.Millisecond), h.lastErr, c.withData, h.interval)
		c.emitLocked(Event{Kind: RegistryDown, Err: h.lastErr, Time: now})
		c.wake() // the maintainer schedules the probes
	case v.wentUp:
		h := &c.health
		out.log(log.InfoLevel, "regcache: registry %s reachable again after %v (%d probes failed); re-validating %d cached services",
			registryName{c.reg}, now.Sub(h.since).Round(time.Millisecond), h.probes, c.withData)
		c.emitLocked(Event{Kind: RegistryUp, Time: now})
		if s, ok := c.stream.(*serviceWatches); ok {
			s.redialNow()
		}
		c.resyncLocked()
		c.pumpLocked(now)
	}
}

// tellFailureLocked logs and tells the failure of one service, once. It is
// told once the service fails twice in a row while the registry is up: a
// single failure may be the start of a registry-wide one, told as such,
// and one that does not last is not worth a warning.
func (c *cache) tellFailureLocked(e *entry, now time.Time, out *outbox) {
	t := &e.throttle
	if t.told || t.lastErr == nil {
		return
	}
	t.told = true
	out.log(log.WarnLevel, "regcache: refresh of service %s failing: %v", quoteName(e.name), t.lastErr)
	c.emitLocked(Event{Kind: RefreshFailed, Service: e.name, Err: t.lastErr, Time: now})
}
