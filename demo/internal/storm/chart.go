package storm

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// chart is what the picture draws: the tables' counts, slot by slot, each
// slot placed on the run's clock. It is built from the report alone, and
// CheckPicture adds its counts up again, scenario by scenario, to compare
// them with the tables.
type chart struct {
	spans []span // the scenarios, as they ran
	// clients has a row per client of the lookup scenarios, in the
	// tables' order, and rpc a line per selector and measure of the
	// client path.
	clients []clientLines
	rpc     []line
	// kill is when the client path's instance was killed, since the start
	// of the run; zero without a client path.
	kill time.Duration
}

// span is one scenario on the run's clock.
type span struct {
	title    string
	from, to time.Duration
}

// clientLines are the lines of one client: registry calls and failed
// lookups, of its warm instance and of its cold one if it has one.
type clientLines struct {
	client string
	lines  []line
}

// measure is a column of the tables that the picture draws.
type measure int

const (
	registryCalls measure = iota
	failedLookups
	failedRPCs
	deadAttempts
)

func (m measure) String() string {
	return [...]string{"registry calls", "failed lookups", "failed RPCs", "attempts to the dead node"}[m]
}

// line is one measure of one group of callers (a Key's String) or one
// selector, over the scenarios it has rows in.
type line struct {
	who   string
	cold  bool
	what  measure
	steps []step
}

// step is a count over a stretch of the run, one slot of one scenario.
type step struct {
	scenario int
	from, to time.Duration // since the start of the run
	n        int64
}

// rate is the step's count per second.
func (s step) rate() float64 { return float64(s.n) / (s.to - s.from).Seconds() }

// chartOf is the chart of r.
func chartOf(r *Report) chart {
	var c chart
	for _, sc := range r.Scenarios {
		c.spans = append(c.spans, span{title: sc.Title, from: sc.Began, to: sc.Ended})
	}
	for _, name := range clientNames(r) {
		cl := clientLines{client: name}
		for _, cold := range []bool{false, true} {
			key := Key{Client: name, Cold: cold}
			calls := line{who: key.String(), cold: cold, what: registryCalls}
			failed := line{who: key.String(), cold: cold, what: failedLookups}
			for p := range r.Scenarios {
				if row, ok := r.Row(p, key); ok {
					calls.steps = append(calls.steps, slotSteps(r, p, row.CallsPerSlot)...)
					failed.steps = append(failed.steps, slotSteps(r, p, row.FailedPerSlot)...)
				}
			}
			if len(calls.steps) > 0 {
				cl.lines = append(cl.lines, calls, failed)
			}
		}
		c.clients = append(c.clients, cl)
	}
	if len(r.Scenarios) > ClientPath {
		sc := &r.Scenarios[ClientPath]
		c.kill = sc.Began + sc.Origin
		for _, x := range sc.RPC {
			c.rpc = append(c.rpc,
				line{who: x.Client, what: failedRPCs, steps: slotSteps(r, ClientPath, x.FailedPerSlot)},
				line{who: x.Client, what: deadAttempts, steps: slotSteps(r, ClientPath, x.DeadPerSlot)})
		}
	}
	return c
}

// slotSteps places scenario p's counts per slot on the run's clock, from
// the scenario's Began to its Ended. The last slot, cut short by the
// scenario's end, is drawn alone if it is at least half a slot wide, and
// joins the slot before otherwise, so that no rate is a count over a few
// milliseconds. Counts in slots past the end (a lookup that read the
// scenario just before it ended) join the last step: every count is
// drawn.
func slotSteps(r *Report, p int, counts []int64) []step {
	sc := &r.Scenarios[p]
	if len(counts) == 0 || sc.Ended <= sc.Began || r.Slot <= 0 {
		return nil
	}
	n := int((sc.Ended - sc.Began + r.Slot/2) / r.Slot)
	n = min(max(n, 1), len(counts))
	steps := make([]step, n)
	for i := range steps {
		from := sc.Began + time.Duration(i)*r.Slot
		steps[i] = step{scenario: p, from: from, to: from + r.Slot, n: counts[i]}
	}
	steps[n-1].to = sc.Ended
	for _, k := range counts[n:] {
		steps[n-1].n += k
	}
	return steps
}

// ErrPicture is what CheckPicture reports: the picture would draw counts
// that are not the tables'.
var ErrPicture = errors.New("the picture's counts are not the tables'")

// CheckPicture checks that the picture of r draws the counts of its
// tables: in every scenario, the slots of each row's registry calls and
// failed lookups, and of the client path's failed RPCs and attempts to the
// dead node, add up to the row's, and the picture draws nothing that no
// row has.
func CheckPicture(r *Report) error {
	type cell struct {
		who      string
		what     measure
		scenario int
	}
	drawn := map[cell]int64{}
	c := chartOf(r)
	for _, cl := range c.clients {
		for _, l := range cl.lines {
			for _, s := range l.steps {
				drawn[cell{l.who, l.what, s.scenario}] += s.n
			}
		}
	}
	for _, l := range c.rpc {
		for _, s := range l.steps {
			drawn[cell{l.who, l.what, s.scenario}] += s.n
		}
	}
	tables := map[cell]int64{}
	for p, sc := range r.Scenarios {
		for _, row := range sc.Rows {
			tables[cell{row.Key.String(), registryCalls, p}] = row.RegistryCalls
			tables[cell{row.Key.String(), failedLookups, p}] = row.Failed
		}
		for _, x := range sc.RPC {
			tables[cell{x.Client, failedRPCs, p}] = x.Failed
			tables[cell{x.Client, deadAttempts, p}] = x.DeadAttempts
		}
	}
	var wrong []string
	for k, n := range tables {
		if drawn[k] != n {
			wrong = append(wrong, fmt.Sprintf("%s, %s: %d %s in the table, %d in the picture", r.Scenarios[k.scenario].Title, k.who, n, k.what, drawn[k]))
		}
	}
	for k, n := range drawn {
		if _, ok := tables[k]; !ok && n != 0 {
			wrong = append(wrong, fmt.Sprintf("%s, %s: no row in the table, %d %s in the picture", r.Scenarios[k.scenario].Title, k.who, n, k.what))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return fmt.Errorf("%w: %s", ErrPicture, strings.Join(wrong, "; "))
	}
	return nil
}
