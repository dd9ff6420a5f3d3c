package cache

import (
	"context"
	"errors"
	"slices"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/core"
	"github.com/regcache/cache/internal/guard"
	"github.com/regcache/cache/internal/snapfile"
	"github.com/regcache/cache/internal/svcdata"
	"github.com/regcache/cache/internal/watchset"
)

// The one pattern of the shell: take mu, give the core an input, and
// unlock, which publishes what the core changed for the lock-free path
// and the other goroutines, releases mu and carries out the rest.

// unlock takes the core's Ready, publishes its first part (the index of
// entries, the mode timers, the observer's events, the calls counted in
// the WaitGroup), releases mu, and carries out the rest: the calls
// started, the log lines written, the waiters woken, the goroutines told.
// mu is held.
func (c *cache) unlock() {
	if c.core.Idle() {
		c.mu.Unlock()
		return
	}
	rd := c.core.Ready()
	c.publish(&rd)
	// What is carried out after the lock is released is copied out of
	// rd, whose slices the core reuses (as a rule, one call or none).
	var buf [2]chan struct{}
	done := buf[:0]
	for _, call := range rd.Done {
		if ch, ok := call.Waiters.(chan struct{}); ok {
			done = append(done, ch)
		}
	}
	var cbuf [2]*core.Call
	calls := append(cbuf[:0], rd.Calls...)
	var watches *watchset.Set
	var index []core.IndexChange
	if len(rd.Index) > 0 || rd.RedialWatches {
		if watches, _ = c.stream.(*watchset.Set); watches != nil {
			index = slices.Clone(rd.Index)
		}
	}
	c.core.Reuse(&rd)
	c.mu.Unlock()

	if rd.StartWatcher {
		go c.watch()
		go c.maintain()
	}
	for _, call := range calls {
		if call.List {
			go c.list(call)
		} else {
			go c.background(call)
		}
	}
	c.flush(rd.Logs)
	// The log lines are written before the waiters wake, so that what a
	// caller does next is never logged before the outcome that caused it.
	for _, ch := range done {
		close(ch)
	}
	if rd.Wake {
		c.wake()
	}
	if rd.Redial {
		select {
		case c.redial <- struct{}{}:
		default:
		}
	}
	if watches != nil {
		tellWatches(watches, index, rd.RedialWatches)
	}
	if rd.Write != nil {
		c.write(rd.Write)
	}
}

// publish does, with mu held, what must be done before another goroutine
// takes mu or reads an entry without it.
func (c *cache) publish(rd *core.Ready) {
	for _, ch := range rd.Index {
		if ch.Held {
			c.entries.Store(ch.Entry.Name, ch.Entry)
		} else {
			c.entries.Delete(ch.Entry.Name)
		}
		c.heldChanged(ch)
	}
	for _, op := range rd.Timers {
		c.arm(op)
	}
	for _, ev := range rd.Events {
		c.obs.queue(c, ev)
	}
	if rd.StartWatcher {
		c.wg.Add(2)
	}
	// Counted here, where Stop (which takes mu) cannot come between the
	// count and the goroutine's start.
	if n := len(rd.Calls); n > 0 {
		c.wg.Add(n)
	}
}

// arm arms or stops an entry's mode timer. The timer puts the mode back
// to ModeSlow when the mode's reason runs out; putting it back early only
// sends reads to the core, which decides again.
func (c *cache) arm(op core.TimerOp) {
	e := op.Entry
	if op.Wait <= 0 {
		if e.Timer != nil {
			e.Timer.Stop()
		}
		return
	}
	if e.Timer == nil {
		e.Timer = time.AfterFunc(op.Wait, func() {
			e.TimerFired.Store(true)
			e.Mode.Store(core.ModeSlow)
		})
		return
	}
	e.Timer.Reset(op.Wait)
}

// refreshTimeout bounds the registry calls of the cache's own refreshes,
// for registries that honour their context: a registry that hangs then
// fails, and is seen down, rather than leaving every refresh out for good.
// It is twice the etcd plugin's own timeout, so that a registry that is
// merely slow is never cut off.
const refreshTimeout = 10 * time.Second

// background makes call in a goroutine that the cache owns.
func (c *cache) background(call *core.Call) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
	defer cancel()
	c.fetch(call, ctx, true)
}

// firstDialWait bounds how long a cold lookup waits for the watcher's
// first Watch call before it asks the registry: long enough for a
// registry that answers, short against one that hangs.
const firstDialWait = 100 * time.Millisecond

// fetch makes the one registry call of call, a GetService, with ctx, and
// gives its outcome to the core. owned is set when ctx derives from the
// cache's, so that Stop cancels it; otherwise it is the caller's, after
// Stop, and a call that fails because the caller gave up is no outcome
// of the registry's either.
func (c *cache) fetch(call *core.Call, ctx context.Context, owned bool) {
	if call.AwaitDial {
		// The first lookups of a process race the stream that they
		// start: data fetched before it is established may miss a change
		// made meanwhile, and is re-validated once it is. Fetched after,
		// it is not, which saves the registry a second call per service
		// at every cold start.
		t := time.NewTimer(firstDialWait)
		select {
		case <-c.firstDial:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		c.mu.Lock()
		c.core.Sending(call)
		c.mu.Unlock()
	}
	svcs, err := guard.GetService(c.reg, call.Name, ctx)
	o := core.Outcome{Err: err}
	switch {
	case err != nil:
		o.Cancelled = ctx != nil && ctx.Err() != nil && (!owned || c.ctx.Err() != nil)
	default:
		o.Services, o.Unusable = svcdata.CloneInLike(svcs, call.Held())
		if o.Unusable != nil {
			o.Services = nil
		}
		o.Prints = svcdata.PrintsLike(o.Services, call.Data())
	}
	c.mu.Lock()
	c.core.Answer(call, o, c.now())
	c.unlock()
}

// list makes a resync's ListServices call, and stores what it lists for
// the services held, a chunk at a time: each copy is made without the
// lock, against the data held.
func (c *cache) list(call *core.Call) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
	list, err := guard.ListServices(c.reg, ctx)
	cancel()
	nodes := false
	for _, s := range list {
		if s != nil && len(s.Nodes) > 0 {
			nodes = true
			break
		}
	}
	c.mu.Lock()
	store := c.core.Listed(call, nodes, len(list) > 0, err, c.now())
	c.unlock()
	if !store {
		return
	}
	listed := map[string][]*registry.Service{}
	for _, s := range list {
		if s == nil || len(s.Nodes) == 0 {
			continue
		}
		if _, held := c.entries.Load(s.Name); held {
			listed[s.Name] = append(listed[s.Name], s)
		}
	}
	all := call.Entries()
	copies := make([][]*registry.Service, core.ScanChunk)
	prints := make([]svcdata.Prints, core.ScanChunk)
	for len(all) > 0 {
		chunk := all[:min(len(all), core.ScanChunk)]
		all = all[len(chunk):]
		for i, e := range chunk {
			copies[i], prints[i] = nil, nil
			if svcs, ok := listed[e.Name]; ok {
				// One that cannot be copied is asked about on its own.
				copies[i], _ = svcdata.CloneInLike(svcs, e.Services())
				prints[i] = svcdata.PrintsLike(copies[i], e.Data.Load())
			}
		}
		c.mu.Lock()
		c.core.ListStore(call, chunk, copies[:len(chunk)], prints[:len(chunk)], c.now())
		c.unlock()
	}
	c.mu.Lock()
	c.core.ListEnd(call, c.now())
	c.unlock()
}

// write writes the snapshot file f, and tells the core how it went.
func (c *cache) write(f *snapfile.File) {
	err := snapfile.Write(c.opts.SnapshotPath, f)
	c.mu.Lock()
	c.core.Wrote(c.opts.SnapshotPath, err)
	c.unlock()
}

// wake tells the maintainer that there is work. It never blocks.
func (c *cache) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// maintain runs the core's background work (Tick) when it is due, until
// Stop.
func (c *cache) maintain() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		next, again := c.core.Tick(c.now())
		c.unlock()
		if again {
			continue
		}
		var t *time.Timer
		var timer <-chan time.Time
		if !next.IsZero() {
			t = time.NewTimer(max(next.Sub(c.now()), time.Millisecond))
			timer = t.C
		}
		select {
		case <-c.ctx.Done():
		case <-c.kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// logLevels maps the core's levels to go-micro's.
var logLevels = [...]log.Level{core.Debug: log.DebugLevel, core.Info: log.InfoLevel, core.Warn: log.WarnLevel, core.Error: log.ErrorLevel}

// flush writes log lines. It must be called without mu held. The caller
// the logger shows is flush's: go-micro's logger names the caller two
// frames above its Logf (its CallerSkipCount of 2, set for its package
// function logger.Logf), which is then the cache's code, not go-micro's.
func (c *cache) flush(lines []core.Log) {
	for _, l := range lines {
		c.opts.Logger.Logf(logLevels[l.Level], l.Format, l.Args...)
	}
}

// logf writes one log line.
func (c *cache) logf(level log.Level, format string, args ...any) {
	c.opts.Logger.Logf(level, format, args...)
}

// errStopped ends the watcher's loop.
var errStopped = errors.New("regcache: stopped")
