package storm

import (
	"fmt"
	"time"

	"go-micro.dev/v4/registry"
)

// The scenarios, in the order they run: indexes into Report.Scenarios.
const (
	ColdStart = iota
	RollingDeploy
	Restart
	Outage
	Recovery
	ClientPath
)

// scenario is one phase of the timeline. To add one, append it to script
// with a constant above, and give it a sentence in summary.go: the
// timeline, the tables and the progress line follow.
type scenario struct {
	title string
	// units is the scenario's length, in units of Config.Unit.
	units int
	// begin starts the scenario, on the script's goroutine. Work that
	// takes time goes to r.during: the next scenario begins after it ends.
	begin func(r *runner) error
	// describe says what happens, for the report.
	describe func(r *Report, sc *Scenario) string
	// current adds the column "current after", counted from sc.Origin.
	current bool
	// rpc says that the scenario's table is of RPCs (Scenario.RPC), not of
	// lookups: the lookup callers have stopped.
	rpc bool
}

// script is the timeline of a run: 42 units, 42 s by default. The caches'
// entries, filled at 0 with a TTL of 5 units, expire together at 5, in the
// middle of the rolling deployment.
var script = []scenario{
	ColdStart: {
		title: "Cold-start storm", units: 4, begin: beginColdStart,
		describe: func(*Report, *Scenario) string {
			return "every caller starts at the same moment, with nothing cached."
		},
	},
	RollingDeploy: {
		title: "Rolling deployment", units: 6, begin: beginRolling,
		describe: func(r *Report, sc *Scenario) string {
			return fmt.Sprintf("from %v in, every service's instance is replaced, one service after another (the new instance registers, then the old one deregisters: %d changes through the registry, so watch streams see them). From then on the registry is slow, %v per call, and every cached entry, filled together at the start with a TTL of %v, expires at once at %v.",
				r.Config.Unit()/2, sc.Changes, r.Config.Slow, r.Config.TTL(), r.Config.TTL())
		},
	},
	Restart: {
		title: "Restart", units: 7, begin: beginRestart, current: true,
		describe: func(r *Report, sc *Scenario) string {
			s := fmt.Sprintf("%s, a service with a single instance, restarts: the instance deregisters %v in, and a new one, on a new node, registers %v later",
				ServiceName(restartSvc), fmtDur(sc.Origin), fmtDur(sc.Registered-sc.Origin))
			switch d := sc.EventSeen - sc.Registered; {
			case sc.EventSeen == 0:
			case d > 0:
				s += fmt.Sprintf("; a watch stream of the demo's own saw the new node %v after that", fmtDur(d))
			default:
				s += "; a watch stream of the demo's own saw the new node before the registration call returned"
			}
			return s + ". Current after: from the deregistration until the last lookup that failed or returned the old node."
		},
	},
	Outage: {
		title: "Registry outage", units: 10, begin: beginOutage,
		describe: func(r *Report, sc *Scenario) string {
			return fmt.Sprintf("the registry is down for %v: %s. Warm: the clients above. Cold: a new instance of each cache, started with the outage, nothing cached.",
				sc.End-sc.Start, r.Outage)
		},
	},
	Recovery: {
		title: "Recovery", units: 8, begin: beginRecovery, current: true,
		describe: func(r *Report, sc *Scenario) string {
			took := ""
			if r.UpTook >= time.Millisecond {
				took = fmt.Sprintf(" (it took %v to start)", fmtDur(r.UpTook))
			}
			return fmt.Sprintf("the registry is back%s, and every service has a new node: its instance restarted during the outage, unseen by any watch stream. Current after: from the registry's return with the new nodes (%v in) until the last lookup that failed or returned an old node.",
				took, fmtDur(sc.Origin))
		},
	},
	ClientPath: {
		title: "Client path", units: 7, begin: beginClientPath, rpc: true,
		describe: describeClientPath,
	},
}

// scriptUnits is the length of the script, in units. (Computed in init:
// the scenarios' descriptions use the unit, which depends on it.)
var scriptUnits int

func init() {
	for _, s := range script {
		scriptUnits += s.units
	}
}

func totalUnits() int { return scriptUnits }

func beginColdStart(r *runner) error {
	r.startInstances(false)
	return nil
}

// beginRolling slows the registry half a unit into the scenario, then
// replaces every service's instance, one after another, until half a unit
// before its end. (The half unit lets the lookups of the cold start leave
// the registry's queue before it slows; the entries filled at the start
// expire at 5 units, while it is slow.)
func beginRolling(r *runner) error {
	n := len(r.fleet.names)
	span := r.length() - r.cfg.Unit()
	r.during(func() error {
		r.sleepUntil(r.cfg.Unit() / 2)
		r.latency.Store(int64(r.cfg.Slow))
		for i := 0; i < n; i++ {
			r.sleepUntil(r.cfg.Unit()/2 + span*time.Duration(i)/time.Duration(n))
			old := r.fleet.gen[i]
			if _, err := r.fleet.start(i); err != nil {
				return err
			}
			if err := r.fleet.stop(i, old, true); err != nil {
				return err
			}
			r.sc.Changes += 2
		}
		return nil
	})
	return nil
}

// restartSvc is the service that restarts.
const restartSvc = 0

// beginRestart stops the single instance of one service a unit and a half
// in, and starts a new one Config.RestartGap later. (By then the callers of no
// cache are out of the queue that the slow registry left, and regcache's
// entries have just been refreshed: the restart does not fall at the end of
// a retry interval, and a retry interval after it ends before the outage.) A watch stream on a connection of
// its own notes when the new node's event arrives, which is when a cache
// that watches can know of it.
func beginRestart(r *runner) error {
	r.latency.Store(int64(r.cfg.Latency))
	old := r.fleet.gen[restartSvc]
	probe, err := r.watchFor(ServiceName(restartSvc), nodeID(restartSvc, old+1))
	if err != nil {
		return fmt.Errorf("watch %s: %w", ServiceName(restartSvc), err)
	}
	r.during(func() error {
		defer probe.stop()
		r.sleepUntil(r.cfg.Unit() * 3 / 2)
		if err := r.fleet.stop(restartSvc, old, true); err != nil {
			return err
		}
		r.sc.Origin = r.sinceStart()
		time.Sleep(r.cfg.RestartGap())
		if _, err := r.fleet.start(restartSvc); err != nil {
			return err
		}
		r.sc.Registered = r.sinceStart()
		r.sc.Changes = 2
		select {
		case at := <-probe.seen:
			r.sc.EventSeen = at - r.tl.phaseStart[r.cur].Sub(r.tl.start)
		case <-time.After(time.Until(r.end)):
		}
		return nil
	})
	return nil
}

func beginOutage(r *runner) error {
	if err := r.b.Down(); err != nil {
		return fmt.Errorf("start the outage: %w", err)
	}
	r.startInstances(true)
	return nil
}

// beginRecovery gives every service a new instance that started during the
// outage, and brings the registry back. The old nodes count as gone from
// the moment the registry serves the new ones: before, no client could
// know.
func beginRecovery(r *runner) error {
	moved := make([]int, len(r.fleet.names)) // the old generation of each service
	move := func() error {
		for i := range moved {
			moved[i] = r.fleet.gen[i]
			if _, err := r.fleet.start(i); err != nil {
				return err
			}
			if err := r.fleet.stop(i, moved[i], false); err != nil {
				return err
			}
		}
		r.sc.Changes = 2 * len(moved)
		return nil
	}
	if r.b.WritesWhileDown() {
		if err := move(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := r.b.Up(); err != nil {
		return fmt.Errorf("end the outage: %w", err)
	}
	r.rep.UpTook = time.Since(t0)
	if !r.b.WritesWhileDown() {
		if err := move(); err != nil {
			return err
		}
	}
	back := r.tl.since()
	for i, gen := range moved {
		r.fleet.markGone(i, gen, back)
	}
	r.sc.Origin = r.sinceStart()
	return nil
}

// probe is a watch stream that notes when it sees one node registered.
type probe struct {
	w    registry.Watcher
	seen chan time.Duration // when, since the start of the run; buffer of one
	done chan struct{}
}

// watchFor opens a watch stream on a connection of its own, and notes when
// it sees node id of service name created or updated.
func (r *runner) watchFor(name, id string) (*probe, error) {
	conn, err := r.b.Client()
	if err != nil {
		return nil, err
	}
	w, err := conn.Watch()
	if err != nil {
		return nil, err
	}
	p := &probe{w: w, seen: make(chan time.Duration, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			res, err := w.Next()
			if err != nil {
				return
			}
			if res == nil || res.Service == nil || res.Service.Name != name || res.Action == "delete" {
				continue
			}
			for _, n := range res.Service.Nodes {
				if n != nil && n.Id == id {
					select {
					case p.seen <- r.tl.since():
					default:
					}
				}
			}
		}
	}()
	return p, nil
}

func (p *probe) stop() {
	p.w.Stop()
	<-p.done
}
