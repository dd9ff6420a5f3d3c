package core

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
)

// The table names every pair of a phase (but gone) and an input once:
// with cells, or as unreachable.
func TestTableNamesEveryPair(t *testing.T) {
	var seen [phases][inputs]int
	for _, c := range Table {
		seen[c.From][c.In] |= 1
	}
	for _, u := range Unreachable {
		seen[u.From][u.In] |= 2
	}
	for p := PhaseAbsent; p < PhaseGone; p++ {
		for in := InLookup; in < inputs; in++ {
			switch seen[p][in] {
			case 0:
				t.Errorf("%v × %v: neither a cell nor unreachable", p, in)
			case 3:
				t.Errorf("%v × %v: both a cell and unreachable", p, in)
			}
		}
	}
}

const the = "svc" // the entry each cell moves

// record starts recording the moves.
func (h *harness) record() {
	h.k.moves = &[]Move{}
}

// movesOf returns the recorded moves of the entry the.
func (h *harness) movesOf() []Move {
	var out []Move
	for _, m := range *h.k.moves {
		if m.Name == the {
			out = append(out, m)
		}
	}
	return out
}

// The phases, reached through the inputs, with the.
func toAbsent(h *harness) {
	r := h.lookup(the)
	h.answer(r.Call, nil, registry.ErrNotFound)
}

func toIdle(h *harness) { h.fill(the) }

func toFetching(h *harness) { h.lookup(the) }

// staleFetching fills the, and lets its data expire and be refreshed by a
// lookup: its call is out.
func staleFetching(h *harness) {
	h.fill(the)
	h.sleep(h.k.cfg.TTL)
	h.lookup(the)
	require.Equal(h.t, PhaseFetching, h.phaseOf())
}

// toQueued fills the and four others, makes them stale, and starts a
// background refresh of each other, which take every slot: the waits in
// line.
func toQueued(h *harness) {
	others := []string{"o1", "o2", "o3", "o4"}
	h.fill(append([]string{the}, others...)...)
	h.sleep(h.k.cfg.TTL)
	for _, o := range others {
		h.lookup(o)
	}
	h.lookup(the)
	require.Equal(h.t, PhaseQueued, h.phaseOf())
}

// freeSlot answers the background refresh of other, freeing its slot.
func freeSlot(other string) func(h *harness) {
	return func(h *harness) {
		h.answer(h.call(other), []*registry.Service{fakereg.Service(other, "1", "n1")}, nil)
	}
}

// toParked: a late watch has the re-validated early, and then again: its
// window open and its early call spent, the line parks it until the
// window closes.
func toParked(h *harness) {
	h.open()
	h.fill(the)
	h.k.Revalidate(the, h.now)
	h.take()
	h.answer(h.call(the), []*registry.Service{one("n1")}, nil)
	h.k.Revalidate(the, h.now)
	h.take()
	require.Equal(h.t, PhaseParked, h.phaseOf())
}

// toEmptied: a delete leaves the with no node: parked for the grace.
func toEmptied(h *harness) {
	h.event("delete", one("n1"))
	require.Equal(h.t, PhaseParked, h.phaseOf())
}

// startList starts a resync whose list is out.
func startList(h *harness) {
	h.k.Resync(h.now)
	h.take()
	require.NotNil(h.t, h.list(), "the resync lists")
}

// listOthers are the services that make a resync list.
var listOthers = []string{"l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10", "l11", "l12"}

// answerTheList answers the list out, listing the and the others.
func answerTheList(h *harness) {
	h.answerList(h.list(), fullList(append(listOthers, the), "n1", "n2"), nil, nil)
}

// listedQueued: the list is out, four stale others take every slot, and
// the waits in line.
func listedQueued(h *harness) {
	h.open()
	h.fill(append(listOthers, the)...)
	h.sleep(h.k.cfg.TTL)
	for _, o := range listOthers[:4] {
		h.lookup(o)
	}
	startList(h)
	h.lookup(the) // in line: the resync holds the line
	require.Equal(h.t, PhaseQueued, h.phaseOf())
}

// down takes the registry down: two services fail in a row.
func down(h *harness) {
	for _, n := range []string{"d1", "d2"} {
		r := h.lookup(n)
		h.answer(r.Call, nil, errDown)
	}
	down, _ := h.k.Health()
	require.True(h.t, down)
}

func staleCfg(c *Config) { c.MaxStale = 2 * time.Minute }
func evictCfg(c *Config) { c.IdleEviction = 10 * time.Millisecond }

func one(id string) *registry.Service { return fakereg.Service(the, "1", id) }

func invalid(h *harness) { h.event("update", &registry.Service{Name: the}) }
func lookup(h *harness)  { h.lookup(the) }
func resync(h *harness)  { h.k.Resync(h.now); h.take() }
func stop(h *harness)    { h.k.Stop(h.now); h.take() }

func sleep(d time.Duration) func(h *harness) {
	return func(h *harness) { h.sleep(d) }
}

func event(action, id string) func(h *harness) {
	return func(h *harness) { h.event(action, one(id)) }
}

func answer(svcs []*registry.Service, err error) func(h *harness) {
	return func(h *harness) { h.answer(h.call(the), svcs, err) }
}

func then(fs ...func(h *harness)) func(h *harness) {
	return func(h *harness) {
		for _, f := range fs {
			f(h)
		}
	}
}

// scenario brings the entry into its cell's phase (setup), under the
// configuration cfg, and applies the input (input); the test records the
// moves of the input alone.
type scenario struct {
	cfg   func(*Config)
	setup func(h *harness)
	input func(h *harness)
	// creates is set when the input makes the entry, new.
	creates bool
}

var found = []*registry.Service{fakereg.Service(the, "1", "n1")}

// scenarios has one scenario per cell of Table, by its cell's key.
var scenarios = map[string]scenario{
	"absent lookup fetching": {setup: func(h *harness) {
		r := h.lookup(the)
		h.answer(r.Call, nil, errDown) // kept a minute, its window 5 s
		h.sleep(5 * time.Second)
	}, input: lookup},
	"absent lookup absent":        {setup: toAbsent, input: lookup},
	"absent create idle":          {setup: toAbsent, input: event("create", "n1")},
	"absent delete absent":        {setup: toAbsent, input: func(h *harness) { h.event("delete", fakereg.Service(the, "1", "n1", "n2")) }},
	"absent delete last absent":   {setup: toAbsent, input: event("delete", "n1")},
	"absent invalid event absent": {setup: toAbsent, input: invalid},
	"absent found idle": {setup: func(h *harness) {
		h.open()
		h.fill(listOthers...)
		toAbsent(h)
		startList(h)
	}, input: answerTheList},
	"absent resync queued": {setup: func(h *harness) { h.open(); toAbsent(h) }, input: resync},
	"absent due gone":      {setup: toAbsent, input: sleep(5 * time.Second)},
	"absent unread gone": {cfg: evictCfg, setup: func(h *harness) {
		r := h.lookup(the)
		h.answer(r.Call, nil, errDown) // kept a minute, its window 5 s
	}, input: sleep(6 * time.Second)},
	"absent unread absent": {cfg: evictCfg, setup: toAbsent, input: sleep(time.Second)},
	"absent stop absent":   {setup: toAbsent, input: stop},

	"idle lookup fetching":   {cfg: staleCfg, setup: then(toIdle, sleep(3*time.Minute)), input: lookup},
	"idle lookup due queued": {setup: then(toIdle, sleep(time.Minute)), input: lookup},
	"idle lookup due idle": {setup: func(h *harness) {
		staleFetching(h)
		h.answer(h.call(the), nil, errDown) // stale, its window open
	}, input: lookup},
	"idle create idle":        {setup: toIdle, input: event("create", "n2")},
	"idle delete idle":        {setup: then(toIdle, event("create", "n2")), input: event("delete", "n2")},
	"idle delete last parked": {setup: toIdle, input: event("delete", "n1")},
	"idle invalid event idle": {setup: toIdle, input: invalid},
	"idle found idle": {setup: func(h *harness) {
		h.open()
		h.fill(append(listOthers, the)...)
		startList(h)
	}, input: answerTheList},
	"idle resync queued": {setup: func(h *harness) { h.open(); toIdle(h) }, input: resync},
	"idle unread gone":   {cfg: evictCfg, setup: toIdle, input: sleep(6 * time.Second)},
	"idle unread idle":   {cfg: evictCfg, setup: toIdle, input: sleep(time.Second)},
	"idle stop idle":     {setup: toIdle, input: stop},

	"queued lookup fetching": {cfg: staleCfg, setup: func(h *harness) {
		h.open()
		h.fill(append(listOthers, the)...)
		h.sleep(3 * time.Minute) // too stale
		startList(h)
		h.k.Revalidate(the, h.now) // in line, held by the resync
		h.take()
	}, input: lookup},
	"queued lookup due queued":    {setup: toQueued, input: lookup},
	"queued create queued":        {setup: toQueued, input: event("create", "n2")},
	"queued delete queued":        {setup: then(toQueued, event("create", "n2")), input: event("delete", "n2")},
	"queued delete last queued":   {setup: toQueued, input: event("delete", "n1")},
	"queued invalid event queued": {setup: toQueued, input: invalid},
	"queued found queued":         {setup: listedQueued, input: answerTheList},
	"queued resync queued":        {setup: toQueued, input: resync},
	"queued line fetching":        {setup: toQueued, input: freeSlot("o1")},
	"queued line parked":          {setup: then(toQueued, event("delete", "n1")), input: freeSlot("o1")},
	"queued line idle":            {setup: then(listedQueued, answerTheList), input: freeSlot("l1")},
	"queued line absent": {cfg: func(c *Config) { c.ProbeInterval = 0 }, setup: func(h *harness) {
		h.open()
		h.fill("o1", "o2", "o3", "o4")
		h.sleep(h.k.cfg.TTL)
		r := h.lookup(the)
		h.answer(r.Call, nil, errDown) // its own failure, its window open
		for _, o := range []string{"o1", "o2", "o3", "o4"} {
			h.lookup(o)
		}
		resync(h) // the, without data, joins the line behind them
		require.Equal(h.t, PhaseQueued, h.phaseOf())
	}, input: freeSlot("o1")},
	"queued unread queued": {cfg: func(c *Config) {
		c.TTL, c.MinimumRetryInterval, c.MaxRetryInterval = 2*time.Millisecond, time.Millisecond, time.Millisecond
		evictCfg(c)
	}, setup: toQueued, input: sleep(20 * time.Millisecond)},
	"queued stop queued": {setup: toQueued, input: stop},

	"parked lookup fetching":      {cfg: staleCfg, setup: then(toIdle, sleep(3*time.Minute), toEmptied), input: lookup},
	"parked lookup due parked":    {setup: toParked, input: lookup},
	"parked create parked":        {setup: toParked, input: event("create", "n2")},
	"parked delete parked":        {setup: then(toParked, event("create", "n2")), input: event("delete", "n2")},
	"parked delete last parked":   {setup: then(toIdle, toEmptied), input: event("delete", "n1")},
	"parked invalid event parked": {setup: toParked, input: invalid},
	"parked found parked": {setup: func(h *harness) {
		h.open()
		h.fill(append(listOthers, the)...)
		startList(h)
		toEmptied(h)
	}, input: answerTheList},
	"parked resync queued": {setup: toParked, input: resync},
	"parked due queued":    {setup: toParked, input: sleep(5 * time.Second)},
	"parked unread parked": {cfg: evictCfg, setup: toParked, input: sleep(time.Second)},
	"parked stop parked":   {setup: toParked, input: stop},

	"fetching lookup fetching":     {setup: toFetching, input: lookup},
	"fetching lookup due fetching": {setup: staleFetching, input: lookup},
	"fetching create fetching":     {setup: toFetching, input: event("create", "n1")},
	"fetching delete fetching": {setup: func(h *harness) {
		h.fill(the)
		h.event("create", one("n2"))
		h.sleep(h.k.cfg.TTL)
		h.lookup(the)
	}, input: event("delete", "n2")},
	"fetching delete last fetching":   {setup: staleFetching, input: event("delete", "n1")},
	"fetching invalid event fetching": {setup: staleFetching, input: invalid},
	"fetching found idle":             {setup: toFetching, input: answer(found, nil)},
	"fetching found queued":           {setup: func(h *harness) { h.open(); toFetching(h); resync(h) }, input: answer(found, nil)},
	"fetching found parked":           {setup: then(staleFetching, event("delete", "n1")), input: answer(found, nil)},
	"fetching not found absent":       {setup: toFetching, input: answer(nil, registry.ErrNotFound)},
	"fetching failed idle":            {setup: staleFetching, input: answer(nil, errDown)},
	"fetching failed absent":          {setup: toFetching, input: answer(nil, errDown)},
	"fetching failed queued":          {setup: func(h *harness) { h.open(); staleFetching(h); resync(h) }, input: answer(nil, errDown)},
	"fetching failed parked":          {setup: then(staleFetching, event("delete", "n1")), input: answer(nil, errDown)},
	"fetching cancelled idle":         {setup: staleFetching, input: func(h *harness) { h.k.Stop(h.now); h.cancel(h.call(the)) }},
	"fetching cancelled absent":       {setup: toFetching, input: func(h *harness) { h.k.Stop(h.now); h.cancel(h.call(the)) }},
	"fetching resync fetching":        {setup: func(h *harness) { h.open(); toFetching(h) }, input: resync},
	"fetching unread fetching":        {cfg: evictCfg, setup: toFetching, input: sleep(time.Second)},
	"fetching stop fetching":          {setup: toFetching, input: stop},
}

func cellKey(c Cell) string { return fmt.Sprintf("%v %v %v", c.From, c.In, c.To) }

// TestTableCells walks every cell: it brings the entry into the cell's
// phase through the core's inputs, applies the cell's input, and checks
// that the entry's first move (none for a cell to the same phase) is the
// cell's.
func TestTableCells(t *testing.T) {
	for _, c := range Table {
		key := cellKey(c)
		t.Run(key, func(t *testing.T) {
			sc, ok := scenarios[key]
			require.True(t, ok, "no scenario for the cell %q", key)
			cfg := testConfig()
			if sc.cfg != nil {
				sc.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			sc.setup(h)
			if sc.creates {
				require.Equal(t, PhaseGone, h.phaseOf(), "the setup holds no entry")
			} else {
				require.Equal(t, c.From, h.phaseOf(), "the setup")
			}
			h.record()
			sc.input(h)
			moves := h.movesOf()
			if c.To == c.From {
				for _, m := range moves {
					require.Equal(t, Move{the, c.From, c.From}, m, "an input that leaves the phase as it is")
				}
				return
			}
			require.NotEmpty(t, moves, "no move; the entry is %v", h.phaseOf())
			assert.Equal(t, Move{the, c.From, c.To}, moves[0], "all moves: %v", moves)
		})
	}
	assert.Len(t, scenarios, len(Table), "a scenario per cell, and no more")
}

// phaseOf is the entry's phase, gone when the core holds none.
func (h *harness) phaseOf() Phase {
	if e := h.k.Find(the); e != nil {
		return e.Phase()
	}
	return PhaseGone
}

// The table in docs/core.md is Table's, between its markers.
func TestTableDoc(t *testing.T) {
	// The root's docs, from internal/core or gomicro5/internal/core.
	path := "../../docs/core.md"
	if _, err := os.Stat(path); err != nil {
		path = "../../../docs/core.md"
	}
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	begin, end := "<!-- table: begin -->\n", "<!-- table: end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	require.True(t, i >= 0 && j > i, "%s has the table's markers", path)
	want := tableMarkdown()
	if got := string(doc[i+len(begin) : j]); got != want {
		if os.Getenv("REGCACHE_WRITE_DOC") != "" {
			out := string(doc[:i+len(begin)]) + want + string(doc[j:])
			require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
			return
		}
		t.Errorf("%s's table is not Table's; REGCACHE_WRITE_DOC=1 go test -run TestTableDoc ./internal/core writes it:\n%s", path, want)
	}
}

// tableMarkdown renders Table and Unreachable: a row per phase and
// input, its cells' phases and whens.
func tableMarkdown() string {
	var b strings.Builder
	b.WriteString("| phase | input | to | when |\n|---|---|---|---|\n")
	for p := PhaseAbsent; p < PhaseGone; p++ {
		for in := InLookup; in < inputs; in++ {
			for _, c := range Table {
				if c.From == p && c.In == in {
					to := c.To.String()
					if c.To == c.From {
						to = "(stays)"
					}
					fmt.Fprintf(&b, "| %v | %v | %s | %s |\n", p, in, to, c.When)
				}
			}
			for _, u := range Unreachable {
				if u.From == p && u.In == in {
					fmt.Fprintf(&b, "| %v | %v | – | cannot happen: %s |\n", p, in, u.Why)
				}
			}
		}
	}
	return b.String()
}
