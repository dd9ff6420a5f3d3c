package policy

import "time"

// SlowCall is how long a call may be out before the cache stops waiting
// for it to decide: a probe still out then no longer holds the next one
// back, and a background refresh no longer holds its slot alone.
const SlowCall = time.Second

// Health is the state of the registry as a whole, next to the per-service
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
// A probe still out SlowCall after it started no longer holds the next
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
type Health struct {
	// Interval is the probe interval; zero turns the state off.
	Interval time.Duration
	Down     bool
	// Since is when the failures that took the registry down began.
	Since time.Time
	// Suspect is the key whose failure began a streak while up, before
	// any answer or a second key's failure has classified it.
	Suspect string
	// LastErr is the failure that took the registry down, or the last one.
	LastErr error
	// LastProbe is when the last probe ended, or when the registry went
	// down. probe numbers the probe in flight (zero: none), and
	// probeStarted is when it started; lastStart is when the last probe,
	// a list's included, started.
	LastProbe               time.Time
	probe                   uint64
	probeStarted, lastStart time.Time
	// Probes counts the probes that failed during this outage.
	Probes int
	// Back is when the registry last came back up: windows opened by
	// failures that ended before it are closed, and calls that started
	// before it cannot take the registry down again.
	Back time.Time
	// failing holds the keys (services, and the suspects that stand for
	// the stream) whose last call failed, and when: their next failure is
	// no evidence. It outlives the entries, so that a broken key looked
	// up now and then counts once, and it is bounded.
	failing map[string]time.Time
	// LastAnswer is when the registry last answered anything.
	LastAnswer time.Time
	// Outages counts the outages, and DownTime adds up the ended ones.
	Outages  uint64
	DownTime time.Duration
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
func (h *Health) evidence(key string, now time.Time) bool {
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

// Cleared records that key's call was answered: its next failure is
// evidence again.
func (h *Health) Cleared(key string) {
	delete(h.failing, key)
}

// Allows reports whether a refresh may go to the registry at now, and
// whether it is the probe.
func (h *Health) Allows(now time.Time) (ok, probe bool) {
	if !h.Down {
		return true, false
	}
	if now.Before(h.NextProbe()) {
		return false, false
	}
	return true, true
}

// NextProbe is when a probe may next start while the registry is down: a
// probe interval after the last one ended, a probe still out counting as
// ended at its deadline (SlowCall after it started).
func (h *Health) NextProbe() time.Time {
	end := h.LastProbe
	if h.probe != 0 {
		end = h.probeStarted.Add(SlowCall)
	}
	return end.Add(h.Interval)
}

// TriedSince reports whether a probe stood in, while the registry is
// down, for the try of a service with nothing to serve whose own window
// ended at closed: a probe out, or one that ended since, tried the
// registry for it. It returns when that probe started. Otherwise the
// service may go as the probe at once, as a throttle of its own would let
// it: a return at the end of its window is seen then, not up to a probe
// interval later.
func (h *Health) TriedSince(closed time.Time) (at time.Time, tried bool) {
	if h.probe != 0 || !h.LastProbe.Before(closed) {
		return h.lastStart, true
	}
	return time.Time{}, false
}

// Probing records that the call numbered id (never zero), a probe,
// started at started. A probe still out past its deadline has failed, as
// far as the pace of probes goes.
func (h *Health) Probing(id uint64, started time.Time) {
	if h.probe != 0 {
		h.Probes++
	}
	h.probe, h.probeStarted, h.lastStart = id, started, started
}

// ListProbing records that a resync's list went to a registry held down
// at now, as the probe of its interval.
func (h *Health) ListProbing(now time.Time) {
	h.LastProbe, h.lastStart = now, now
}

// Probed records that the probe numbered id ended at now, and reports
// whether it was the probe in flight: one overtaken by a later probe was
// counted already.
func (h *Health) Probed(id uint64, now time.Time) bool {
	if h.probe != id {
		return false
	}
	h.probe, h.LastProbe = 0, now
	return true
}

// StreamSuspect and RedialSuspect stand for the watch stream in a failure
// streak: a stream lost, and a Watch call failed. Two failures in a row of
// different suspects (the stream and its redial, the stream and a service,
// two services) take the registry down.
const (
	StreamSuspect = "\x00stream"
	RedialSuspect = "\x00redial"
)

// Verdict is what an outcome changed about the registry's health.
type Verdict struct {
	WentDown, WentUp bool
	// Resync is set when a service that failed alone is answered again:
	// the registry may have been out without the cache noticing, and a
	// watch stream can lose what changed meanwhile without failing.
	Resync bool
}

// Failed records a failed call for service (or a suspect standing for the
// stream) that started at started and ended at now. Only a key whose last
// call did not fail gives evidence: a key that keeps failing is its own
// trouble, and tells nothing new about the registry.
func (h *Health) Failed(service string, err error, started, now time.Time) (v Verdict) {
	h.LastErr = err
	evidence := h.evidence(service, now)
	switch {
	case h.Interval <= 0 || h.Down || !evidence:
	case started.Before(h.Back):
		// A call from before the registry came back: not evidence about
		// it now.
	case h.Suspect == "":
		h.Suspect, h.Since = service, now
	case h.Suspect != service:
		// The first probe may go at once: if the guess is wrong, it
		// costs one round trip rather than a probe interval.
		h.Down, h.Suspect, h.LastProbe, h.Probes, h.probe = true, "", now.Add(-h.Interval), 0, 0
		h.Outages++
		v.WentDown = true
	}
	return v
}

// Answered records a refresh of service that the registry answered, found
// or not, or (with service "") a list or a watch stream established.
func (h *Health) Answered(service string, now time.Time) (v Verdict) {
	h.Cleared(service)
	h.LastAnswer = now
	if h.Down {
		// A probe still out is no longer the probe: the next outage
		// starts its own.
		h.Down, h.Back, h.Suspect, h.probe = false, now, "", 0
		h.DownTime += now.Sub(h.Since)
		v.WentUp = true
		return v
	}
	v.Resync = h.Suspect != "" && h.Suspect == service
	h.Suspect = ""
	return v
}
