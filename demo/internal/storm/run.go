package storm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go-micro.dev/v4/registry"
	gmcache "go-micro.dev/v4/registry/cache"

	regcache "github.com/regcache/cache"
)

// The scenarios, in the order they run. Each is a phase of one timeline,
// in units of Config.Unit (1 s by default).
const (
	ColdStart = iota
	RollingDeploy
	Outage
	Recovery
	numPhases
)

// phaseUnits are the phase boundaries, in units: [0,4) [4,10) [10,20)
// [20,30). The caches' entries, filled at 0 with a TTL of 5, expire
// together at 5, in the middle of the rolling deployment.
var phaseUnits = [numPhases + 1]int{0, 4, 10, 20, 30}

var phaseTitles = [numPhases]string{
	"Cold-start storm",
	"Rolling deployment",
	"Registry outage",
	"Recovery",
}

// think is the pause between two lookups of one caller: a caller doing
// other work.
const think = time.Millisecond

// The clients.
const (
	NoCache  = "no cache"
	GoMicro  = "go-micro cache"
	RegCache = "regcache"
)

// Group keys: a client, and whether it was started with the outage
// (cold) or has run since the beginning (warm).
type Key struct {
	Client string
	Cold   bool
}

func (k Key) String() string {
	if k.Cold {
		return k.Client + ", cold"
	}
	return k.Client
}

// timeline is the clock of the simulation: the phase that new lookups and
// registry calls count towards.
type timeline struct {
	start      time.Time
	phaseStart [numPhases]time.Time // written before cur moves to the phase
	cur        atomic.Int32
}

func (t *timeline) phase() int32 { return t.cur.Load() }

// Row is what one group of callers saw in one phase.
type Row struct {
	Key           Key
	RegistryCalls int64
	Lookups       int64
	Failed        int64
	P50, P99, Max time.Duration
	// Waiting is the time the group's callers spent in lookups.
	Waiting time.Duration
	// LastFailed is when, after the start of the phase, the last failed
	// lookup of the phase started; zero if none failed.
	LastFailed time.Duration
	// FirstOK is when, after the start of the phase, the first registry
	// call of the phase that succeeded started; zero if none did.
	FirstOK time.Duration
	// Old counts the lookups of the recovery that returned none of the
	// nodes registered when the registry came back, and LastOld is when
	// the last of them started, after the start of the phase.
	Old     int64
	LastOld time.Duration
}

// Scenario is one phase's table.
type Scenario struct {
	Title      string
	Start, End time.Duration // since the start of the run
	Rows       []Row
}

// Report is the result of Run.
type Report struct {
	Config    Config
	Backend   string
	Outage    string
	Scenarios [numPhases]Scenario
	// UpTook is how long the registry took to serve again at the start of
	// the recovery (an etcd restart).
	UpTook time.Duration
}

// Row returns the row of key in phase p.
func (r *Report) Row(p int, key Key) (Row, bool) {
	for _, row := range r.Scenarios[p].Rows {
		if row.Key == key {
			return row, true
		}
	}
	return Row{}, false
}

// ServiceName is the name of service i.
func ServiceName(i int) string { return fmt.Sprintf("demo.svc-%03d", i) }

// service is service i with one node of generation gen ("a" before the
// outage, "b" after it).
func service(i int, gen string) *registry.Service {
	port := 20000 + i
	if gen == "b" {
		port = 40000 + i
	}
	return &registry.Service{
		Name:    ServiceName(i),
		Version: "1.0.0",
		Nodes: []*registry.Node{{
			Id:      fmt.Sprintf("%s-%s", ServiceName(i), gen),
			Address: fmt.Sprintf("127.0.0.1:%d", port), // never dialled
		}},
	}
}

// group is the callers of one client instance.
type group struct {
	key     Key
	lookup  registry.Registry // what the callers call
	counter *counter
	stop    func()
	callers []*caller
	wg      sync.WaitGroup
	quit    atomic.Bool

	lookups atomic.Int64 // for the progress line
	failed  atomic.Int64
}

type phaseStats struct {
	h          hist
	waiting    time.Duration
	failed     int64
	lastFailed time.Duration
	old        int64
	lastOld    time.Duration
}

type caller struct {
	stats [numPhases]phaseStats
}

// world is what the callers share: the timeline, the service names, and
// the node each service should have after the recovery.
type world struct {
	tl     *timeline
	names  []string
	moved  atomic.Bool // the nodes of generation "b" are registered
	newIDs []string
}

func (w *world) start(g *group, n int) {
	for i := 0; i < n; i++ {
		c := &caller{}
		g.callers = append(g.callers, c)
		g.wg.Add(1)
		go w.loop(g, c, i)
	}
}

func (w *world) loop(g *group, c *caller, offset int) {
	defer g.wg.Done()
	for i := offset; !g.quit.Load(); i++ {
		svc := i % len(w.names)
		p := w.tl.phase()
		start := time.Now()
		svcs, err := g.lookup.GetService(w.names[svc])
		d := time.Since(start)
		st := &c.stats[p]
		st.h.add(d)
		st.waiting += d
		g.lookups.Add(1)
		if err != nil {
			st.failed++
			st.lastFailed = start.Sub(w.tl.phaseStart[p])
			g.failed.Add(1)
		} else if p == Recovery && w.moved.Load() && !hasNode(svcs, w.newIDs[svc]) {
			st.old++
			st.lastOld = start.Sub(w.tl.phaseStart[p])
		}
		time.Sleep(think)
	}
}

func hasNode(svcs []*registry.Service, id string) bool {
	for _, s := range svcs {
		for _, n := range s.Nodes {
			if n.Id == id {
				return true
			}
		}
	}
	return false
}

// Run runs the scenarios against b and returns what the clients saw. It
// writes progress to progress; tty says whether progress is a terminal,
// where the progress line is redrawn in place.
func Run(cfg Config, b Backend, progress io.Writer, tty bool) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	unit := cfg.Unit()
	at := func(p int) time.Duration { return time.Duration(phaseUnits[p]) * unit }

	w := &world{tl: &timeline{}}
	for i := 0; i < cfg.Services; i++ {
		w.names = append(w.names, ServiceName(i))
		w.newIDs = append(w.newIDs, service(i, "b").Nodes[0].Id)
		if err := b.Register(service(i, "a")); err != nil {
			return nil, fmt.Errorf("register %s: %w", ServiceName(i), err)
		}
	}

	latency := &atomic.Int64{}
	latency.Store(int64(cfg.Latency))
	// Every client instance gets its own connection to the registry,
	// made up front: go-micro's etcd plugin cannot connect while etcd is
	// down, so the cold instances connect before the outage too.
	keys := []Key{{Client: NoCache}, {Client: GoMicro}, {Client: RegCache}, {Client: GoMicro, Cold: true}, {Client: RegCache, Cold: true}}
	byKey := map[Key]*group{}
	for _, key := range keys {
		conn, err := b.Client()
		if err != nil {
			return nil, fmt.Errorf("connect %v to the registry: %w", key, err)
		}
		inj := &injector{Registry: conn, latency: latency, refuses: b.Refuses}
		if cfg.Capacity > 0 {
			inj.slots = make(chan struct{}, cfg.Capacity)
		}
		cnt := &counter{Registry: inj, tl: w.tl}
		byKey[key] = &group{key: key, counter: cnt, lookup: cnt, stop: func() {}}
	}
	// start creates the client's cache, if it has one, and its callers.
	var groups []*group
	start := func(key Key) {
		g := byKey[key]
		switch key.Client {
		case GoMicro:
			c := gmcache.New(g.counter, gmcache.WithTTL(cfg.TTL()))
			g.lookup, g.stop = c, c.Stop
		case RegCache:
			c := regcache.New(g.counter, RegcacheOptions(cfg)...)
			g.lookup, g.stop = c, c.Stop
		}
		groups = append(groups, g)
		w.start(g, cfg.Concurrency)
	}

	rep := &Report{Config: cfg, Backend: b.Describe(), Outage: b.OutageNote()}
	prog := &progressLine{w: progress, tty: tty, total: cfg.Duration}
	w.tl.start = time.Now()
	var runErr error
	for p := 0; p < numPhases && runErr == nil; p++ {
		deadline := w.tl.start.Add(at(p + 1))
		w.tl.phaseStart[p] = time.Now()
		w.tl.cur.Store(int32(p))
		prog.phase(p, time.Since(w.tl.start))
		switch p {
		case ColdStart:
			for _, key := range keys[:3] {
				start(key)
			}
		case RollingDeploy:
			latency.Store(int64(cfg.Slow))
		case Outage:
			latency.Store(int64(cfg.Latency))
			if err := b.Down(); err != nil {
				runErr = fmt.Errorf("start the outage: %w", err)
				break
			}
			for _, key := range keys[3:] {
				start(key)
			}
		case Recovery:
			t0 := time.Now()
			if err := b.Up(); err != nil {
				runErr = fmt.Errorf("end the outage: %w", err)
				break
			}
			rep.UpTook = time.Since(t0)
			// The instances restarted while the registry was down: every
			// service now has a new node, and the old one is gone.
			for i := 0; i < cfg.Services && runErr == nil; i++ {
				if err := b.Register(service(i, "b")); err != nil {
					runErr = fmt.Errorf("register %s: %w", ServiceName(i), err)
				} else if err := b.Deregister(service(i, "a")); err != nil {
					runErr = fmt.Errorf("deregister %s: %w", ServiceName(i), err)
				}
			}
			w.moved.Store(true)
		}
		prog.wait(deadline, w.tl.start, p, groups)
	}
	for _, g := range groups {
		g.quit.Store(true)
	}
	for _, g := range groups {
		g.wg.Wait()
		g.stop()
	}
	prog.done(time.Since(w.tl.start))
	if runErr != nil {
		return nil, runErr
	}

	for p := 0; p < numPhases; p++ {
		sc := Scenario{Title: phaseTitles[p], Start: at(p), End: at(p + 1)}
		for _, g := range groups {
			var (
				h   hist
				row = Row{Key: g.key, RegistryCalls: g.counter.calls[p].Load(), FirstOK: time.Duration(g.counter.firstOK[p].Load())}
			)
			for _, c := range g.callers {
				st := &c.stats[p]
				h.merge(&st.h)
				row.Failed += st.failed
				row.Waiting += st.waiting
				row.Old += st.old
				row.LastFailed = max(row.LastFailed, st.lastFailed)
				row.LastOld = max(row.LastOld, st.lastOld)
			}
			if h.n == 0 && row.RegistryCalls == 0 {
				continue // a cold group before it started
			}
			row.Lookups = h.n
			row.P50, row.P99, row.Max = h.quantile(0.5), h.quantile(0.99), h.quantile(1)
			sc.Rows = append(sc.Rows, row)
		}
		rep.Scenarios[p] = sc
	}
	return rep, nil
}

// RegcacheOptions are the options the demo gives regcache: the TTL of
// go-micro's cache, and the retry interval scaled with the timeline
// (the library's default at the default duration). Everything else is at
// its default.
func RegcacheOptions(cfg Config) []regcache.Option {
	opts := []regcache.Option{regcache.WithTTL(cfg.TTL())}
	if cfg.RetryInterval() != regcache.DefaultMinimumRetryInterval {
		opts = append(opts, regcache.WithMinimumRetryInterval(cfg.RetryInterval()))
	}
	return opts
}

// progressLine writes where the run is: a line per phase, and a status
// line every second, redrawn in place on a terminal and every five seconds
// otherwise.
type progressLine struct {
	w     io.Writer
	tty   bool
	total time.Duration
	open  bool // a redrawn line is on screen
}

func (p *progressLine) phase(i int, elapsed time.Duration) {
	p.clear()
	fmt.Fprintf(p.w, "[%5.1fs/%v] %d/%d %s\n", elapsed.Seconds(), p.total, i+1, numPhases, phaseTitles[i])
}

func (p *progressLine) clear() {
	if p.open {
		fmt.Fprint(p.w, "\r\033[K")
		p.open = false
	}
}

func (p *progressLine) wait(deadline, start time.Time, phase int, groups []*group) {
	every := 5 * time.Second
	if p.tty {
		every = time.Second
	}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		time.Sleep(min(left, every))
		left = time.Until(deadline)
		if left <= 0 {
			return
		}
		var lookups, failed int64
		for _, g := range groups {
			lookups += g.lookups.Load()
			failed += g.failed.Load()
		}
		line := fmt.Sprintf("[%5.1fs/%v] %s, %.0fs left; %s lookups so far, %s failed",
			time.Since(start).Seconds(), p.total, phaseTitles[phase], left.Seconds(), count(lookups), count(failed))
		if p.tty {
			fmt.Fprint(p.w, "\r\033[K"+line)
			p.open = true
		} else {
			fmt.Fprintln(p.w, line)
		}
	}
}

func (p *progressLine) done(elapsed time.Duration) {
	p.clear()
	fmt.Fprintf(p.w, "[%5.1fs/%v] done\n", elapsed.Seconds(), p.total)
}
