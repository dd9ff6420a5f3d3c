package core

import (
	"time"

	"github.com/regcache/cache/internal/policy"
)

// The watch stream and the registry's health, as inputs: the watcher
// (the shell's one loop) tells the core when a Watch call returns, when a
// stream opens and when it ends; the per-service watches of
// WatchPerService tell it of each watch (Notice).
//
// A stream is a hint, never the truth: real plugins lose events, and
// etcd's client hides an outage behind its own reconnects. So every stream
// established is followed by a resync of the data fetched before it, a
// stream lost counts towards the registry's health, and while the stream
// is down with nothing else answering, its redial is the probe.

// streamState is the watch stream's.
type streamState struct {
	// open is set while a stream is established: the single stream, or
	// the set of per-service watches (set). failing holds the services
	// whose own watch waits for a redial.
	open, set bool
	failing   map[string]struct{}
	// dialed is set once the first Watch call has returned.
	dialed bool
	// since is when the stream was last established or lost; count is
	// the streams established so far.
	since time.Time
	count int
	// openedDown is when the stream was established while the registry
	// was held down, and unproven: such a stream brings the registry up
	// once it has delivered an event or lasted SlowCall, or a data call
	// answers.
	openedDown time.Time
	// refusals counts the Watch calls of the one stream refused in a row
	// while the registry answers; triedPerService is set once a watch of
	// one service was tried, and perService once the cache watches each
	// service on its own instead.
	refusals                    int
	triedPerService, perService bool
	// resyncPending is set when the registry came back while the stream
	// was down: the resync waits until resyncBy for the reconnect it
	// asked for, so that one round covers both.
	resyncPending bool
	resyncBy      time.Time
	// failedSince is set by a failed refresh and cleared when an answer
	// asks for a redial: an answer after failures cuts the stream's
	// backoff once.
	failedSince bool
}

// cleared forgets that the watch of a service fails: it opened, or the
// service was dropped.
func (s *streamState) cleared(name string) {
	if s.failing != nil {
		delete(s.failing, name)
	}
}

// down reports whether the stream is down: the single stream, or a
// per-service watch.
func (k *Core) streamDown() bool {
	if k.stream.set {
		return len(k.stream.failing) > 0
	}
	return !k.stream.open && k.watching
}

// redialWait is how long a resync waits for the stream it redialled, so
// that one round covers both; then it goes on without the stream.
const redialWait = 200 * time.Millisecond

// Health reports whether the registry is held down, and its probe
// interval.
func (k *Core) Health() (down bool, interval time.Duration) {
	return k.health.Down, k.health.Interval
}

// Dialed tells that the watcher's first Watch call has returned, opened or
// not: cold lookups need not wait for it any more.
func (k *Core) Dialed() { k.stream.dialed = true }

// DialFailed records a failed or overdue Watch call of the one stream,
// started at started. While the registry is held down it is a failed
// probe.
func (k *Core) DialFailed(err error, started, now time.Time) {
	if k.health.Down {
		k.health.Probes++
	}
	k.streamFailed(policy.RedialSuspect, err, started, now)
	if k.stream.resyncPending {
		// The registry came back but its stream did not: resync
		// without waiting for it.
		k.stream.resyncPending = false
		k.advance()
	}
}

// Opened records a stream established at now: the single stream, or (set)
// the set of per-service watches, whose watches tell of themselves. It
// reports false after Stop: the shell closes the stream.
func (k *Core) Opened(set bool, now time.Time) bool {
	if k.stopped {
		return false
	}
	st := &k.stream
	st.open, st.set, st.refusals, st.since = true, set, 0, now
	st.count++
	if st.count > 1 {
		k.Stats.Reconnects.Add(1)
	}
	if set {
		// Data fetched before the set opened is re-validated, as for a
		// stream; each watch that opens later has its own service's.
		k.advance()
		return true
	}
	k.health.Cleared(policy.StreamSuspect)
	k.health.Cleared(policy.RedialSuspect)
	if k.health.Down {
		// The resync's list, or the stream's first event or second,
		// brings the registry up.
		st.openedDown = now
		k.schedule(now.Add(policy.SlowCall))
		k.advance()
	} else {
		k.streamAnswered(now)
	}
	st.resyncPending = false
	return true
}

// Closed records that the stream ended at now with err; lost is false
// when Stop ended it, which is no failure.
func (k *Core) Closed(err error, lost bool, now time.Time) {
	k.stream.open = false
	k.stream.since = now
	if lost {
		k.streamFailed(policy.StreamSuspect, err, now, now)
	}
}

// Notice tells the observer of the stream lost or back.
func (k *Core) Notice(kind EventKind, err error, now time.Time) {
	k.emit(Event{Kind: kind, Err: err, Time: now})
}

// RedialWait is the wait before redial attempt n, u uniform in [0, 1).
// While the registry is held down, the redials come a probe interval
// apart, and never closer than the backoff's first step: they are probes.
// Otherwise Watch fails while the registry answers, and the backoff
// applies. probe tells the first case.
func (k *Core) RedialWait(n int, u float64) (wait time.Duration, probe bool) {
	if h := &k.health; h.Down && h.Interval > 0 {
		return max(h.Interval, policy.BackoffBase), true
	}
	return policy.Backoff(n, u), false
}

// oneStreamRefusals is how many Watch calls of every service in a row must
// fail, while the registry answers lookups, before the cache tries a watch
// of one service.
const oneStreamRefusals = 3

// Refused records that the one stream's Watch call failed (overdue: it
// hung), and returns the service of which a watch of its own is to be
// tried, if the registry may watch one service at a time: go-micro's
// Consul registry refuses the one stream at once every time while it
// answers GetService. After oneStreamRefusals such failures in a row, a
// watch of one service held is tried, once in the cache's life. A Watch
// that fails while the registry is held down or before it ever answered,
// or that hangs, is an outage, which the backoff is for.
func (k *Core) Refused(overdue bool) (try string) {
	st := &k.stream
	switch {
	case k.cfg.WatchPerService || st.perService || st.triedPerService:
		return ""
	case k.health.Down || k.health.LastAnswer.IsZero() || overdue:
		st.refusals = 0
	default:
		st.refusals++
	}
	if st.refusals >= oneStreamRefusals {
		if e := k.anyEntry(); e != nil {
			try = e.Name
		}
	}
	st.triedPerService = try != ""
	return try
}

// WatchPerService records that the registry watched one service when it
// refused to watch them all: the cache watches each on its own from now
// on.
func (k *Core) WatchPerService() { k.stream.perService = true }

// PerService reports whether the cache watches each service on its own.
func (k *Core) PerService() bool { return k.cfg.WatchPerService || k.stream.perService }

// streamAnswered records the stream as an answer from the registry: a
// resync of the data fetched before it.
func (k *Core) streamAnswered(now time.Time) {
	k.stream.openedDown = time.Time{}
	v := k.health.Answered("", now)
	k.verdict(v, now) // back up: resyncs, the stream being set
	if !v.WentUp {
		k.advance()
	}
}

// proveStream brings the registry up on the evidence of a stream
// established while it was held down, once the stream has delivered an
// event (event) or lasted SlowCall. It returns when to look again (zero:
// nothing to prove).
func (k *Core) proveStream(now time.Time, event bool) time.Time {
	at := k.stream.openedDown
	if at.IsZero() || !k.stream.open {
		return time.Time{}
	}
	if !event && now.Sub(at) < policy.SlowCall {
		return at.Add(policy.SlowCall)
	}
	k.stream.openedDown = time.Time{}
	if k.health.Down {
		k.verdict(k.health.Answered("", now), now)
	}
	return time.Time{}
}

// streamFailed applies a failure of the stream to the registry's health;
// suspect stands for what failed.
func (k *Core) streamFailed(suspect string, err error, started, now time.Time) {
	k.verdict(k.health.Failed(suspect, err, started, now), now)
}

// answer records that the registry answered: service's refresh, or with
// service "" a list or a watch stream. The first answer after failures
// also cuts the watch stream's reconnect backoff: the registry is back, so
// the stream should be too.
func (k *Core) answer(service string, now time.Time) {
	v := k.health.Answered(service, now)
	k.verdict(v, now)
	if v.Resync && !v.WentUp {
		k.resync(now)
	}
	if !k.stream.open && k.watching && k.stream.failedSince {
		k.stream.failedSince = false
		k.rd.Redial = true
	}
}

// verdict applies a verdict of the registry's health: the log line and
// observer event of a registry-wide change, and the resync when the
// registry comes back.
func (k *Core) verdict(v policy.Verdict, now time.Time) {
	h := &k.health
	switch {
	case v.WentDown:
		k.log(Warn, "regcache: registry %s unreachable since %v (%v): %v; serving %d cached services from memory and refusing cold lookups, with one probe every %v until it answers",
			k.cfg.Registry, h.Since.Format(time.RFC3339), now.Sub(h.Since).Round(time.Millisecond), h.LastErr, k.withData, h.Interval)
		k.emit(Event{Kind: RegistryDown, Err: h.LastErr, Time: now})
		k.wake() // the maintainer schedules the probes
	case v.WentUp:
		k.log(Info, "regcache: registry %s reachable again after %v (%d probes failed); re-validating %d cached services",
			k.cfg.Registry, now.Sub(h.Since).Round(time.Millisecond), h.Probes, k.withData)
		k.emit(Event{Kind: RegistryUp, Time: now})
		if k.stream.set {
			k.rd.RedialWatches = true
		}
		if k.work.round == nil {
			// (A resync running, whose list brought the registry back,
			// covers the outage already.)
			k.resync(now)
		}
		k.pump(now)
	}
}

// resync starts a resync of every entry. When the stream is down it asks
// for the stream first, and resyncs once it is back or by resyncBy, so
// that one round covers both the gap and the stream.
func (k *Core) resync(now time.Time) {
	if k.stopped {
		return
	}
	if k.streamDown() {
		// (The set redials every failed watch when the registry comes
		// back, and tells when it has.)
		k.stream.resyncPending = true
		k.stream.resyncBy = now.Add(redialWait)
		k.rd.Redial = true
		k.wake() // to resync anyway if the stream is not back by resyncBy
		return
	}
	k.advance()
}

// advance starts a new resync epoch: data fetched before it may have
// missed changes, and is re-validated by the maintainer's next round. It
// is the one place where the epoch moves.
func (k *Core) advance() {
	k.epoch++
	k.wake()
}

// resyncDue reports whether a resync waits for the stream or the
// maintainer, or runs.
func (k *Core) resyncDue() bool {
	return k.stream.resyncPending || k.work.lastRound < k.epoch || k.work.round != nil
}

// Epoch is the resync epoch.
func (k *Core) Epoch() uint64 { return k.epoch }

// Resync starts a resync of every entry at now, as a stream established
// again would.
func (k *Core) Resync(now time.Time) { k.resync(now) }
