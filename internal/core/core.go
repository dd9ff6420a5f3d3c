// Package core is the state of a regcache cache and every rule that
// changes it, as a state machine that does no I/O.
//
// Its methods take the time and one input: a lookup that the lock-free
// path could not answer, a registry call's answer or failure, a watch
// event, the stream opened, lost or failing to open, the maintainer's
// timer, Stop. Each changes the state and queues what must happen next in
// a Ready: registry calls to start, waiters to wake, log lines, observer
// events, the maintainer's next run, the entries to publish. The cache
// (the root package) holds the lock around every call, takes the Ready,
// and carries it out: it is the only part that starts goroutines, reads
// the clock, logs or calls the registry.
//
// So every transition is a plain function call, and a test drives the
// core with explicit inputs and times: no goroutines, no sleeps. A Core is
// not safe for concurrent use, but for the fields and methods that say so
// (an entry's published data, the counters), which the cache's lock-free
// read path uses.
//
// An entry's life is one Phase (entry.go), changed in one place, move,
// along the table in table.go.
package core

import (
	"time"

	"github.com/regcache/cache/internal/policy"
	"github.com/regcache/cache/internal/snapfile"
	"github.com/regcache/cache/internal/timeq"
)

// Config is what the core needs of the cache's options, validated.
type Config struct {
	TTL                  time.Duration
	MinimumRetryInterval time.Duration
	// MaxRetryInterval is at least MinimumRetryInterval.
	MaxRetryInterval time.Duration
	RefreshAhead     float64
	TTLJitter        float64
	MaxStale         time.Duration
	LastKnownNodes   bool
	IdleEviction     time.Duration
	ProbeInterval    time.Duration
	WatchPerService  bool
	// Observe is set when an observer wants events; Persist when a
	// snapshot file keeps the data.
	Observe, Persist bool
	// Registry names the registry in log lines.
	Registry string
	// Rand returns a number uniform in [0, 1).
	Rand func() float64
	// Base is what the moments kept per entry count from: a time before
	// any the core is given.
	Base time.Time
	// BulkMin is the number of services in doubt from which a resync
	// lists them all; zero means the default, BulkMin.
	BulkMin int
}

// Core is the cache's state. See the package doc.
type Core struct {
	cfg Config

	// byName finds an entry by its service's name; all holds them in no
	// order, for the scans, each at its index.
	byName   map[string]*Entry
	all      []*Entry
	withData int

	health policy.Health
	// probe is the probe out, a GetService, whose answer the lookups
	// refused meanwhile wait for (nil: none).
	probe *Call
	// epoch is the resync epoch: it advances (resync) when data fetched
	// before may have missed changes. calls numbers the registry calls
	// that fetch data, in the order they start.
	epoch, calls uint64

	stream streamState
	work   workQueue
	// sweep holds the entries without data (PhaseAbsent), by when they go.
	sweep timeq.Queue[*Entry]
	scans scans

	stopped   bool
	stoppedAt time.Time
	// watching is set once the watcher and the maintainer were started.
	watching bool

	// heldSeq numbers the changes to the services held.
	heldSeq uint64

	persist persistState

	// Stats are the counters (Counters), which the shell keeps, for its
	// lock-free path to count into without a pointer to follow.
	Stats *Counters
	// Violations counts the moves that the transition table does not
	// allow: bugs of the core, which the tests check for. moves, when
	// set, records every move (the table's tests).
	Violations int
	moves      *[]Move

	rd, spare Ready
}

// New returns an empty core, counting into stats.
func New(cfg Config, stats *Counters) *Core {
	if cfg.BulkMin <= 0 {
		cfg.BulkMin = BulkMin
	}
	k := &Core{cfg: cfg, byName: map[string]*Entry{}, Stats: stats}
	k.health.Interval = cfg.ProbeInterval
	return k
}

// Ready is what the inputs since the last call to Ready ask of the shell.
// The first group is published before the lock is released, so that a
// reader who takes the lock next, or reads without it, finds it done; the
// rest is carried out after.
type Ready struct {
	// Index lists the entries stored and dropped, in order, each numbered
	// as a change to the services held.
	Index []IndexChange
	// Timers lists the entries whose mode timer is to be armed (Wait > 0)
	// or stopped.
	Timers []TimerOp
	// Events are for the observer, in the order of the changes they tell.
	Events []Event
	// Calls are the registry calls to start. Each is counted in the
	// shell's WaitGroup before the lock is released, where Stop cannot
	// come between.
	Calls []*Call

	// Done are the calls whose waiters may wake: their results are set.
	Done []*Call
	// Logs are the log lines, to write before the waiters wake.
	Logs []Log
	// Wake asks the maintainer to run (Tick) now: it may have work, or
	// a time to be woken at that is earlier than the last it was given.
	Wake bool
	// Redial asks the watcher to redial its stream now; RedialWatches
	// asks the per-service watches to redial those that failed.
	Redial, RedialWatches bool
	// Write is a snapshot file's content to write.
	Write *snapfile.File
	// StartWatcher asks the shell to start the watcher and the
	// maintainer: the first lookup came.
	StartWatcher bool
}

// IndexChange is an entry stored (Held) or dropped, the Seq-th change to
// the services held.
type IndexChange struct {
	Entry *Entry
	Held  bool
	Seq   uint64
}

// TimerOp arms an entry's mode timer to fire after Wait, or stops it
// (Wait 0).
type TimerOp struct {
	Entry *Entry
	Wait  time.Duration
}

// Level is a log line's level.
type Level uint8

const (
	Debug Level = iota
	Info
	Warn
	Error
)

// Log is one log line, as format and args.
type Log struct {
	Level  Level
	Format string
	Args   []any
}

// Ready returns what the inputs since the last call ask of the shell, and
// forgets it. The slices are the caller's until it gives them back
// (Reuse).
func (k *Core) Ready() Ready {
	rd := k.rd
	k.rd = Ready{Index: k.spare.Index, Timers: k.spare.Timers, Events: k.spare.Events, Calls: k.spare.Calls, Done: k.spare.Done}
	k.spare = Ready{}
	return rd
}

// Idle reports whether the inputs since the last call to Ready asked
// nothing of the shell, as most events do: it need not take the Ready.
func (k *Core) Idle() bool {
	rd := &k.rd
	return len(rd.Index) == 0 && len(rd.Timers) == 0 && len(rd.Events) == 0 && len(rd.Calls) == 0 &&
		len(rd.Done) == 0 && len(rd.Logs) == 0 && !rd.Wake && !rd.Redial && !rd.RedialWatches &&
		rd.Write == nil && !rd.StartWatcher
}

// Reuse gives back the slices of rd, which the caller is done with, for
// the next Ready: a lookup or an event then allocates none.
func (k *Core) Reuse(rd *Ready) {
	k.spare = Ready{Index: rd.Index[:0], Timers: rd.Timers[:0], Events: rd.Events[:0], Calls: rd.Calls[:0], Done: rd.Done[:0]}
	clear(rd.Index[:cap(rd.Index)])
	clear(rd.Timers[:cap(rd.Timers)])
	clear(rd.Events[:cap(rd.Events)])
	clear(rd.Calls[:cap(rd.Calls)])
	clear(rd.Done[:cap(rd.Done)])
}

func (k *Core) log(level Level, format string, args ...any) {
	k.rd.Logs = append(k.rd.Logs, Log{level, format, args})
}

// wake asks the maintainer to run now.
func (k *Core) wake() { k.rd.Wake = true }

// schedule makes sure the maintainer runs at at or earlier.
func (k *Core) schedule(at time.Time) {
	if w := &k.work; w.wakeAt.IsZero() || at.Before(w.wakeAt) {
		w.wakeAt = at
		k.wake()
	}
}

// Stopped reports whether Stop was called.
func (k *Core) Stopped() bool { return k.stopped }

// anyEntry returns some entry, or nil: the one Watch of a single service
// that tells whether a registry watches one service at a time.
func (k *Core) anyEntry() *Entry {
	if len(k.all) == 0 {
		return nil
	}
	return k.all[0]
}
