package storm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
)

// think is the pause between two lookups of one caller: a caller doing
// other work.
const think = time.Millisecond

// timeline is the clock of the simulation: the scenario that new lookups
// and registry calls count towards, and the slot of it they fall in.
type timeline struct {
	start      time.Time
	phaseStart []time.Time // written before cur moves to the scenario
	cur        atomic.Int32
	// slot is the width of the time slots that the picture's counts are
	// kept in, and slots how many each scenario has.
	slot  time.Duration
	slots []int
}

func (t *timeline) phase() int32         { return t.cur.Load() }
func (t *timeline) since() time.Duration { return time.Since(t.start) }

// slotOf is the slot of scenario p that the moment at falls in. Slots count
// from the scenario's start as it ran, so that none straddles two scenarios
// and a scenario's slots add up to its row. A moment past the last slot
// counts in the last one.
func (t *timeline) slotOf(p int32, at time.Time) int {
	i := int(at.Sub(t.phaseStart[p]) / t.slot)
	return min(max(i, 0), t.slots[p]-1)
}

// slotOverrun is how far past its scheduled end a scenario's slots reach:
// the client path waits for its RPCs in flight, up to the request timeout,
// and a scenario's work can end a little late on a busy machine.
const slotOverrun = rpcRequestTimeout + time.Second

// newTimeline is the timeline of a run of cfg, its slots a quarter unit
// wide, 250 ms by default.
func newTimeline(cfg Config) *timeline {
	tl := &timeline{phaseStart: make([]time.Time, len(script)), slot: cfg.Unit() / 4}
	for p := range script {
		tl.slots = append(tl.slots, int((cfg.length(p)+slotOverrun+tl.slot-1)/tl.slot))
	}
	return tl
}

// Row is what one group of callers saw in one scenario. Times "since the
// start" are since the scenario's start.
type Row struct {
	Key           Key
	RegistryCalls int64 // GetService and ListServices calls that reached the registry
	Lookups       int64
	// Failed counts the lookups that returned an error or no node.
	Failed int64
	// Old counts the lookups that returned a node that had left the
	// registry before the lookup started; OldLag is how long before, at
	// most.
	Old           int64
	OldLag        time.Duration
	P50, P99, Max time.Duration
	// Waiting is the time the group's callers spent in lookups.
	Waiting time.Duration
	// FirstOK is when, since the start, the first registry call of the
	// scenario that succeeded started; zero if none did.
	FirstOK time.Duration
	// LastFailed and LastBad are when, since the start, the last lookup
	// started that failed, and that failed or returned an old node, of
	// those that ended within the scenario; zero if none did.
	LastFailed, LastBad time.Duration
	// AllServed is when, since the start of the scenario, the last service
	// to be served was first served: a lookup of the scenario returned it
	// with a current node. Zero if some service never was.
	AllServed time.Duration
	// CurrentAfter is the time from the scenario's Origin to the start of
	// the last lookup that failed or returned an old node; zero if none did
	// after the Origin. Stuck says that one did in the last quarter unit of
	// the scenario: the group may never have been current.
	CurrentAfter time.Duration
	Stuck        bool
	// CallsPerSlot and FailedPerSlot are RegistryCalls and Failed slot by
	// slot, for the picture: slot i is Report.Slot wide and starts i slots
	// after the scenario's Began. They add up to RegistryCalls and Failed.
	CallsPerSlot, FailedPerSlot []int64
}

// Scenario is one scenario's table, and what happened in it.
type Scenario struct {
	Title      string
	Start, End time.Duration // since the start of the run, as scheduled
	// Began and Ended are the same as the scenario ran: it ends when its
	// work has, and the client path once its RPCs in flight have.
	Began, Ended time.Duration
	// Origin is when, since the start of the scenario, the change it is
	// about happened: "current after" counts from it. In the restart, the
	// old instance's deregistration; in the recovery, the registry serving
	// again, with every service's new node.
	Origin time.Duration
	// Registered is when, in the restart, the new instance registered, and
	// EventSeen when a watch stream of the demo's own received its event
	// (zero if none did); both since the start of the scenario.
	Registered, EventSeen time.Duration
	// Changes counts the registrations and deregistrations the scenario
	// made.
	Changes int
	// Rows are the lookup callers' rows; RPC, in the client path, the RPC
	// clients'.
	Rows []Row
	RPC  []RPCRow
}

// Length is the scenario's scheduled length.
func (s *Scenario) Length() time.Duration { return s.End - s.Start }

// Report is the result of Run.
type Report struct {
	Config    Config
	Backend   string
	Outage    string
	Scenarios []Scenario
	// UpTook is how long the registry took to serve again at the start of
	// the recovery (an etcd restart).
	UpTook time.Duration
	// Slot is the width of the time slots of the counts per slot (a
	// quarter unit).
	Slot time.Duration
	// About and Notes are each client's Describe and Note, by name.
	About, Notes map[string]string
}

// Row returns the row of key in scenario p.
func (r *Report) Row(p int, key Key) (Row, bool) {
	for _, row := range r.Scenarios[p].Rows {
		if row.Key == key {
			return row, true
		}
	}
	return Row{}, false
}

// group is the callers of one client instance.
type group struct {
	key     Key
	client  Client
	counter *counter
	lookup  registry.Registry // what the callers call
	stop    func()
	callers []*caller
	wg      sync.WaitGroup
	quit    atomic.Bool
	stopped bool // the script's goroutine only

	lookups atomic.Int64 // for the progress line
	failed  atomic.Int64
	// served holds, by scenario and service, when (since the start of the
	// run, plus one) a lookup that started in the scenario first returned
	// the service with a current node; zero until one has.
	served [][]atomic.Int64
}

// phaseStats is what one caller saw in one scenario. Times are since the
// start of the run.
type phaseStats struct {
	h                   hist
	waiting             time.Duration
	failed, old         int64
	failedPerSlot       []int64
	oldLag              time.Duration
	lastFailed, lastBad time.Duration
}

type caller struct {
	stats []phaseStats // by scenario; the caller's goroutine only, until it ends
}

// runner runs the script: the scenarios one after another, on the script's
// goroutine, with the work they hand to during.
type runner struct {
	cfg     Config
	clients []Client
	b       Backend
	tl      *timeline
	fleet   *fleet
	latency *atomic.Int64
	rep     *Report
	groups  map[Key]*group
	started []*group // in the order they started
	rpc     *rpcRun  // the client path's, once it has started

	// The current scenario; set before it begins, and kept until its
	// work has ended.
	cur int
	sc  *Scenario
	end time.Time

	bg    sync.WaitGroup
	bgMu  sync.Mutex
	bgErr error
}

// Run runs the scenarios against b and returns what the clients saw. It
// writes progress to progress; tty says whether progress is a terminal,
// where the progress line is redrawn in place.
func Run(cfg Config, b Backend, progress io.Writer, tty bool) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clients := cfg.Clients
	if clients == nil {
		clients = DefaultClients()
	}
	tl := newTimeline(cfg)
	r := &runner{
		cfg: cfg, clients: clients, b: b, tl: tl,
		fleet:   newFleet(b, tl, cfg.Services),
		latency: &atomic.Int64{},
		rep: &Report{Config: cfg, Backend: b.Describe(), Outage: b.OutageNote(), Slot: tl.slot,
			About: map[string]string{}, Notes: map[string]string{}},
		groups: map[Key]*group{},
	}
	r.latency.Store(int64(cfg.Latency))
	for i := range r.fleet.names {
		if err := b.Register(r.fleet.service(i, 0)); err != nil {
			return nil, fmt.Errorf("register %s: %w", ServiceName(i), err)
		}
	}
	// Every client instance gets its own connection to the registry,
	// made up front: go-micro's etcd plugin cannot connect while etcd is
	// down, so the cold instances connect before the outage too.
	for _, c := range clients {
		if c.Describe != nil {
			r.rep.About[c.Name] = c.Describe(cfg)
		}
		r.rep.Notes[c.Name] = c.Note
		keys := []Key{{Client: c.Name}}
		if c.Cold {
			keys = append(keys, Key{Client: c.Name, Cold: true})
		}
		for _, key := range keys {
			conn, err := b.Client()
			if err != nil {
				return nil, fmt.Errorf("connect %v to the registry: %w", key, err)
			}
			inj := &injector{Registry: conn, latency: r.latency, refuses: b.Refuses}
			if cfg.Capacity > 0 {
				inj.slots = make(chan struct{}, cfg.Capacity)
			}
			g := &group{key: key, client: c, counter: newCounter(inj, tl), served: make([][]atomic.Int64, len(script))}
			for p := range g.served {
				g.served[p] = make([]atomic.Int64, cfg.Services)
			}
			r.groups[key] = g
		}
	}

	at := time.Duration(0)
	for p, s := range script {
		r.rep.Scenarios = append(r.rep.Scenarios, Scenario{Title: s.title, Start: at, End: at + cfg.length(p)})
		at += cfg.length(p)
	}
	prog := &progressLine{w: progress, tty: tty, total: cfg.total()}
	tl.start = time.Now()
	var runErr error
	for p := range script {
		r.cur, r.sc = p, &r.rep.Scenarios[p]
		r.end = tl.start.Add(r.sc.End)
		tl.phaseStart[p] = time.Now()
		tl.cur.Store(int32(p))
		if !cfg.runs(p) {
			continue
		}
		prog.phase(p, tl.since())
		if runErr = script[p].begin(r); runErr != nil {
			break
		}
		prog.wait(r.end, tl.start, p, r.status)
		r.bg.Wait()
		if runErr = r.bgErr; runErr != nil {
			break
		}
	}
	ended := tl.since()
	r.bg.Wait() // after an error in begin
	r.stopLookups()
	prog.done(tl.since())
	if runErr != nil {
		return nil, runErr
	}
	for p := range script {
		sc := &r.rep.Scenarios[p]
		sc.Began, sc.Ended = tl.phaseStart[p].Sub(tl.start), ended
		if p+1 < len(script) {
			sc.Ended = tl.phaseStart[p+1].Sub(tl.start)
		}
		r.rows(p)
	}
	return r.rep, nil
}

// startInstances creates an instance of every client, or of every client
// with a cold instance, and starts its callers.
func (r *runner) startInstances(cold bool) {
	for _, g := range r.groupsInOrder() {
		if g.key.Cold != cold {
			continue
		}
		g.lookup, g.stop = g.client.New(g.counter, r.cfg)
		r.started = append(r.started, g)
		for i := 0; i < r.cfg.Concurrency; i++ {
			c := &caller{stats: make([]phaseStats, len(r.rep.Scenarios))}
			for p := range c.stats {
				c.stats[p].failedPerSlot = make([]int64, r.tl.slots[p])
			}
			g.callers = append(g.callers, c)
			g.wg.Add(1)
			go r.loop(g, c, i)
		}
	}
}

// stopLookups stops every lookup caller, and each client instance once its
// callers have returned.
func (r *runner) stopLookups() {
	for _, g := range r.started {
		g.quit.Store(true)
	}
	for _, g := range r.started {
		if !g.stopped {
			g.wg.Wait()
			g.stop()
			g.stopped = true
		}
	}
}

// status is what the progress line says: in the client path, its RPCs;
// before, the lookups.
func (r *runner) status() string {
	if r.rpc != nil {
		n, failed := r.rpc.status()
		return fmt.Sprintf("%s RPCs so far, %s failed", count(n), count(failed))
	}
	var lookups, failed int64
	for _, g := range r.started {
		lookups += g.lookups.Load()
		failed += g.failed.Load()
	}
	return fmt.Sprintf("%s lookups so far, %s failed", count(lookups), count(failed))
}

// groupsInOrder is every group, in the order of the clients, warm ones
// first.
func (r *runner) groupsInOrder() []*group {
	var out []*group
	for _, cold := range []bool{false, true} {
		for _, c := range r.clients {
			if g, ok := r.groups[Key{Client: c.Name, Cold: cold}]; ok {
				out = append(out, g)
			}
		}
	}
	return out
}

// loop is one caller: it looks up one service after another, and notes
// what each lookup returned.
func (r *runner) loop(g *group, c *caller, offset int) {
	defer g.wg.Done()
	names := r.fleet.names
	for i := offset; !g.quit.Load(); i++ {
		name := names[i%len(names)]
		p := r.tl.phase()
		start := time.Now()
		svcs, err := g.lookup.GetService(name)
		d := time.Since(start)
		at := start.Sub(r.tl.start)
		st := &c.stats[p]
		st.h.add(d)
		st.waiting += d
		g.lookups.Add(1)
		nodes, old, lag := r.fleet.check(svcs, at)
		// A lookup that ends in the next scenario may have failed
		// because of it (the outage): it does not say when this
		// scenario's client became current.
		within := r.tl.phase() == p
		switch {
		case err != nil || nodes == 0:
			st.failed++
			st.failedPerSlot[r.tl.slotOf(p, start)]++
			g.failed.Add(1)
			if within {
				st.lastFailed, st.lastBad = at, at
			}
		case old:
			st.old++
			st.oldLag = max(st.oldLag, lag)
			if within {
				st.lastBad = at
			}
		default:
			if first := &g.served[p][i%len(names)]; first.Load() == 0 {
				first.CompareAndSwap(0, int64(at+d)+1)
			}
		}
		time.Sleep(think)
	}
}

// rows builds scenario p's table of lookups. (The client path builds its
// own.)
func (r *runner) rows(p int) {
	if script[p].rpc || !r.cfg.runs(p) {
		return
	}
	sc := &r.rep.Scenarios[p]
	start := r.tl.phaseStart[p].Sub(r.tl.start)
	rel := func(t time.Duration) time.Duration { // since the start of the scenario
		if t <= 0 {
			return 0
		}
		return max(t-start, 1)
	}
	for _, g := range r.started {
		var h hist
		row := Row{Key: g.key, RegistryCalls: g.counter.calls[p].Load(), FirstOK: time.Duration(g.counter.firstOK[p].Load()),
			CallsPerSlot: g.counter.perSlot(p), FailedPerSlot: make([]int64, r.tl.slots[p])}
		for _, c := range g.callers {
			st := &c.stats[p]
			h.merge(&st.h)
			row.Failed += st.failed
			for i, n := range st.failedPerSlot {
				row.FailedPerSlot[i] += n
			}
			row.Old += st.old
			row.OldLag = max(row.OldLag, st.oldLag)
			row.Waiting += st.waiting
			row.LastFailed = max(row.LastFailed, rel(st.lastFailed))
			row.LastBad = max(row.LastBad, rel(st.lastBad))
		}
		if h.n == 0 && row.RegistryCalls == 0 {
			continue // a cold group before it started
		}
		row.Lookups = h.n
		row.P50, row.P99, row.Max = h.quantile(0.5), h.quantile(0.99), h.quantile(1)
		row.AllServed = allServed(g.served[p], start)
		if script[p].current && row.LastBad > sc.Origin {
			row.CurrentAfter = row.LastBad - sc.Origin
			row.Stuck = row.LastBad >= sc.Length()-r.cfg.Unit()/4
		}
		sc.Rows = append(sc.Rows, row)
	}
}

// allServed is when, since start, the last of served was first served
// (Row.AllServed), or zero if one never was.
func allServed(served []atomic.Int64, start time.Duration) time.Duration {
	var last time.Duration
	for i := range served {
		at := served[i].Load()
		if at == 0 {
			return 0
		}
		last = max(last, time.Duration(at-1))
	}
	return max(last-start, 1)
}

// during runs f on a goroutine of its own; the scenario ends when f has
// returned, and the run stops with f's error.
func (r *runner) during(f func() error) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		if err := f(); err != nil {
			r.bgMu.Lock()
			if r.bgErr == nil {
				r.bgErr = err
			}
			r.bgMu.Unlock()
		}
	}()
}

// sinceStart is the time since the current scenario started.
func (r *runner) sinceStart() time.Duration { return time.Since(r.tl.phaseStart[r.cur]) }

// sleepUntil sleeps until d after the start of the current scenario.
func (r *runner) sleepUntil(d time.Duration) { time.Sleep(time.Until(r.tl.phaseStart[r.cur].Add(d))) }

// length is the current scenario's scheduled length.
func (r *runner) length() time.Duration { return r.sc.Length() }
