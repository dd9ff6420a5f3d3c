package core

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/svcdata"
)

// harness drives a Core as the cache's shell does, on a clock of its own:
// after every input it takes the Ready, keeps the calls out until the test
// answers them, and runs the maintainer (Tick) until it has nothing more to
// do at that instant. No goroutine, no sleep.
type harness struct {
	t   testing.TB
	k   *Core
	now time.Time
	// out are the calls out, in the order they started; started counts
	// the calls of each service, done holds the calls whose waiters woke.
	out     []*Call
	started map[string]int
	lists   int
	done    []*Call
	logs    []Log
	events  []Event
	// wakeAt is when the maintainer runs next (zero: when woken).
	wakeAt time.Time
	// lenient leaves the table's violations to the caller (the model's
	// driver), rather than failing the test at once.
	lenient bool
	// timers are the mode timers armed, by when they fire: the shell's,
	// fired when a read comes after their time (hit).
	timers map[*Entry]time.Time
}

// testConfig is the cache's default configuration, with rand fixed.
func testConfig() Config {
	return Config{
		TTL:                  time.Minute,
		MinimumRetryInterval: 5 * time.Second,
		MaxRetryInterval:     5 * time.Second,
		ProbeInterval:        time.Second,
		Registry:             "fake",
		Rand:                 func() float64 { return 0.5 },
		Base:                 time.Unix(1_000_000, 0),
		Observe:              true,
	}
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, k: New(cfg, new(Counters)), now: cfg.Base.Add(time.Hour), started: map[string]int{}}
	return h
}

// take takes the core's Ready, and runs the maintainer while it asks.
func (h *harness) take() {
	for {
		rd := h.k.Ready()
		for _, c := range rd.Calls {
			h.out = append(h.out, c)
			if c.List {
				h.lists++
			} else {
				h.started[c.Name]++
			}
		}
		for _, op := range rd.Timers {
			if h.timers == nil {
				h.timers = map[*Entry]time.Time{}
			}
			if op.Wait > 0 {
				h.timers[op.Entry] = h.now.Add(op.Wait)
			} else {
				delete(h.timers, op.Entry)
			}
		}
		h.done = append(h.done, rd.Done...)
		h.logs = append(h.logs, rd.Logs...)
		h.events = append(h.events, rd.Events...)
		if h.k.Violations > 0 && !h.lenient {
			h.t.Fatalf("a move the transition table does not allow: %v", h.logs)
		}
		// The maintainer runs once as it starts, and then when woken or
		// due.
		if !rd.Wake && !rd.StartWatcher && (h.wakeAt.IsZero() || h.now.Before(h.wakeAt)) {
			return
		}
		next, again := h.k.Tick(h.now)
		h.wakeAt = next
		if again {
			h.wakeAt = h.now
		}
	}
}

// sleep moves the clock on by d, running the maintainer at each moment it
// asked for on the way.
func (h *harness) sleep(d time.Duration) {
	end := h.now.Add(d)
	for !h.wakeAt.IsZero() && !h.wakeAt.After(end) {
		if h.wakeAt.After(h.now) {
			h.now = h.wakeAt
		}
		next, again := h.k.Tick(h.now)
		h.wakeAt = next
		if again {
			h.wakeAt = h.now
		}
		h.take()
	}
	h.now = end
	next, again := h.k.Tick(h.now)
	h.wakeAt = next
	if again {
		h.wakeAt = h.now
	}
	h.take()
}

// lookup is a lookup that the lock-free path could not answer.
func (h *harness) lookup(name string) Read {
	r := h.k.Lookup(name, First, h.now)
	h.take()
	return r
}

// hit is a lookup as the cache makes it: lock-free when the entry's mode
// allows.
func (h *harness) hit(name string) Read {
	e := h.k.Find(name)
	if at, ok := h.timers[e]; ok && !h.now.Before(at) {
		// The mode timer fired.
		delete(h.timers, e)
		e.TimerFired.Store(true)
		e.Mode.Store(ModeSlow)
	}
	if e != nil && e.Mode.Load() != ModeSlow {
		if s := e.Data.Load(); s != nil {
			return Read{Services: s.Services}
		}
	}
	return h.lookup(name)
}

// call returns the call out for name, or nil.
func (h *harness) call(name string) *Call {
	for _, c := range h.out {
		if !c.List && c.Name == name {
			return c
		}
	}
	return nil
}

// list returns the list call out, or nil.
func (h *harness) list() *Call {
	for _, c := range h.out {
		if c.List {
			return c
		}
	}
	return nil
}

func (h *harness) forget(c *Call) {
	h.out = slices.DeleteFunc(h.out, func(o *Call) bool { return o == c })
}

// answer answers c (a GetService) with svcs, or err, as the shell gives
// an answer to the core: copied in.
func (h *harness) answer(c *Call, svcs []*registry.Service, err error) {
	h.forget(c)
	o := Outcome{Err: err}
	if err == nil {
		o.Services, o.Unusable = svcdata.CloneInLike(svcs, c.Held())
		if o.Unusable != nil {
			o.Services = nil
		}
		o.Prints = svcdata.PrintsLike(o.Services, c.Data())
	}
	h.k.Answer(c, o, h.now)
	h.take()
}

// cancel ends c as Stop's cancellation does.
func (h *harness) cancel(c *Call) {
	h.forget(c)
	h.k.Answer(c, Outcome{Err: errors.New("context canceled"), Cancelled: true}, h.now)
	h.take()
}

// answerList answers list call c with list (err for a failure), storing
// it as the shell does, a chunk at a time, with between runs between
// chunks.
func (h *harness) answerList(c *Call, list []*registry.Service, err error, between func(chunk int)) {
	h.forget(c)
	nodes := false
	for _, s := range list {
		nodes = nodes || len(s.Nodes) > 0
	}
	store := h.k.Listed(c, nodes, len(list) > 0, err, h.now)
	h.take()
	if !store {
		return
	}
	listed := map[string][]*registry.Service{}
	for _, s := range list {
		if len(s.Nodes) > 0 && h.k.Find(s.Name) != nil {
			listed[s.Name] = append(listed[s.Name], s)
		}
	}
	all := c.Entries()
	for i := 0; len(all) > 0; i++ {
		if between != nil {
			between(i)
		}
		chunk := all[:min(len(all), ScanChunk)]
		all = all[len(chunk):]
		copies := make([][]*registry.Service, len(chunk))
		prints := make([]svcdata.Prints, len(chunk))
		for j, e := range chunk {
			if svcs, ok := listed[e.Name]; ok {
				copies[j], _ = svcdata.CloneInLike(svcs, e.Services())
				prints[j] = svcdata.PrintsLike(copies[j], e.Data.Load())
			}
		}
		h.k.ListStore(c, chunk, copies, prints, h.now)
		h.take()
	}
	h.k.ListEnd(c, h.now)
	h.take()
}

// event applies a watch event, prepared as the shell prepares it.
func (h *harness) event(action string, s *registry.Service) {
	res := &registry.Result{Action: action, Service: fakereg.Copy(s)}
	h.k.Stats.Heard.Add(1)
	e := h.k.Find(s.Name)
	if e == nil {
		h.k.Stats.EventsIgnored.Add(1)
		return
	}
	snap := e.Data.Load()
	p := svcdata.Prepare(res, snap, h.k.cfg.LastKnownNodes, nil)
	h.k.Event(res, &p, e, snap, nil, h.now)
	h.take()
}

// open establishes the one stream, as the watcher's first dial does.
func (h *harness) open() {
	h.k.startWatcher()
	h.k.Dialed()
	h.k.Opened(false, h.now)
	h.take()
}

// lose ends the stream with err.
func (h *harness) lose(err error) {
	h.k.Closed(err, true, h.now)
	h.take()
}

// fill looks each name up cold and answers it with one node, n1.
func (h *harness) fill(names ...string) {
	for _, n := range names {
		r := h.lookup(n)
		if r.Call == nil {
			h.t.Fatalf("%s: no call: %+v", n, r)
		}
		h.answer(r.Call, []*registry.Service{fakereg.Service(n, "1", "n1")}, nil)
	}
}

// ids lists the node ids of every version, in order.
func ids(svcs []*registry.Service) []string {
	var out []string
	for _, s := range svcs {
		for _, n := range s.Nodes {
			out = append(out, n.Id)
		}
	}
	return out
}

// nodesOf returns the ids of the nodes name holds, or nil.
func (h *harness) nodesOf(name string) []string {
	if e := h.k.Find(name); e != nil {
		return ids(e.Services())
	}
	return nil
}
