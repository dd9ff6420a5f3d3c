package eject

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/registry"
)

// tableHarness drives one node of service "svc", whose cached list holds
// n1 … n4, through Health's methods, recording the moves of its state.
type tableHarness struct {
	t     *testing.T
	p     *Health
	now   *time.Time
	list  []*registry.Node
	node  *registry.Node // the node the cell is about
	cur   []*registry.Service
	moves []string // "from in to" of node's moves
}

var tableRefused = merrors.InternalServerError("go.micro.client", "connection error: refused")

func newTableHarness(t *testing.T, cfg func(*Config)) *tableHarness {
	list := []*registry.Node{}
	for i := 1; i <= 4; i++ {
		list = append(list, &registry.Node{Id: fmt.Sprintf("n%d", i), Address: fmt.Sprintf("n%d:8080", i)})
	}
	p, _, now := testPassive(list...)
	c := defaults
	c.LimboShare, c.LimboBound = 0.5, time.Minute
	if cfg != nil {
		cfg(&c)
	}
	p.cfg.Store(&c)
	h := &tableHarness{t: t, p: p, now: now, list: list, node: list[0]}
	h.cur = []*registry.Service{{Name: "svc", Version: "1", Nodes: list}}
	p.held = func(string) []*registry.Service { return h.cur }
	p.onMove = func(service, key string, from nodeState, in input, to nodeState) {
		if service == "svc" && key == nodeKey(h.node) {
			h.moves = append(h.moves, fmt.Sprintf("%v %v %v", from, in, to))
		}
	}
	t.Cleanup(func() { assert.Zero(t, p.violations.Load(), "moves the table does not allow") })
	return h
}

func (h *tableHarness) fail(n *registry.Node)  { h.p.Mark("svc", n, tableRefused) }
func (h *tableHarness) reach(n *registry.Node) { h.p.Mark("svc", n, nil) }

// sleep moves the clock by d, and with it the ejections that end: the
// clock's input, inEnd, is given to every node.
func (h *tableHarness) sleep(d time.Duration) {
	*h.now = h.now.Add(d)
	h.p.each(func(sh *serviceHealth) {
		sh.mu.Lock()
		sh.nodes.Range(func(_, v any) bool {
			for _, nh := range v.(*nodeSet).nodes {
				sh.settleLocked(nh, h.p.nanos(*h.now))
			}
			return true
		})
		sh.mu.Unlock()
	})
}

// eject ejects n with failures in a row.
func (h *tableHarness) eject(n *registry.Node) {
	for i := 0; i < h.p.cfg.Load().EjectAfter; i++ {
		h.fail(n)
	}
}

// sweepNow makes a failure of another service sweep idle state.
func (h *tableHarness) sweepNow() {
	h.p.nextSweep.Store(0)
	h.p.Mark("other", &registry.Node{Id: "x"}, tableRefused)
}

// offList makes the cell's node one that is not on the list.
func (h *tableHarness) offList() { h.node = &registry.Node{Address: "10.9.9.9:1"} }

// pushOut fails as many other nodes off the list as are kept.
func (h *tableHarness) pushOut() {
	for i := 0; i <= maxOffList; i++ {
		h.fail(&registry.Node{Address: fmt.Sprintf("10.8.0.%d:1", i)})
	}
}

// sel is a Select of "svc" that meets the list the cache holds now.
func (h *tableHarness) sel() {
	_, _ = h.p.Select("svc", h.cur, nil, nil)
}

// lose makes the registry lose every node at once, and a Select meet it.
func (h *tableHarness) lose() {
	h.sel()
	h.cur = nil
	h.sel()
}

// relist brings every node back on the list, and a Select meets it.
func (h *tableHarness) relist() {
	h.cur = []*registry.Service{{Name: "svc", Version: "1", Nodes: h.list}}
	h.sel()
}

// stateOf is the cell's node's state now.
func (h *tableHarness) stateOf() nodeState {
	sh := h.p.lookup("svc")
	if sh == nil {
		return stateHealthy
	}
	nh := sh.node(h.node)
	if nh == nil {
		return stateHealthy
	}
	return nh.phase(h.p.nanos(*h.now))
}

type tableScenario struct {
	cfg   func(*Config)
	setup func(h *tableHarness)
	input func(h *tableHarness)
}

func ejectAfter1(c *Config) { c.EjectAfter = 1 }

// recovering brings the cell's node to recovering: ejected, on trial,
// reached.
func recovering(h *tableHarness) {
	h.eject(h.node)
	h.sleep(30 * time.Second)
	h.reach(h.node)
}

var tableScenarios = map[string]tableScenario{
	"healthy fail failing": {setup: func(*tableHarness) {}, input: func(h *tableHarness) { h.fail(h.node) }},
	"healthy fail ejected": {cfg: ejectAfter1, setup: func(*tableHarness) {}, input: func(h *tableHarness) { h.fail(h.node) }},

	"failing fail failing": {setup: func(h *tableHarness) { h.fail(h.node) }, input: func(h *tableHarness) { h.fail(h.node) }},
	"failing fail ejected": {setup: func(h *tableHarness) { h.fail(h.node); h.fail(h.node) }, input: func(h *tableHarness) { h.fail(h.node) }},
	"failing reached recovering": {setup: func(h *tableHarness) { recovering(h); h.fail(h.node) },
		input: func(h *tableHarness) { h.reach(h.node) }},
	"failing reached gone": {setup: func(h *tableHarness) { h.fail(h.node) }, input: func(h *tableHarness) { h.reach(h.node) }},
	"failing idle gone": {setup: func(h *tableHarness) { h.fail(h.node); h.sleep(2 * time.Minute) },
		input: func(h *tableHarness) { h.sweepNow() }},
	"failing pushed out gone": {setup: func(h *tableHarness) { h.offList(); h.fail(h.node) },
		input: func(h *tableHarness) { h.pushOut() }},

	"ejected fail ejected":    {setup: func(h *tableHarness) { h.eject(h.node) }, input: func(h *tableHarness) { h.fail(h.node) }},
	"ejected reached ejected": {setup: func(h *tableHarness) { h.eject(h.node) }, input: func(h *tableHarness) { h.reach(h.node) }},
	"ejected end on trial":    {setup: func(h *tableHarness) { h.eject(h.node) }, input: func(h *tableHarness) { h.sleep(30 * time.Second) }},
	"ejected cap on trial": {setup: func(h *tableHarness) { h.eject(h.node); h.sleep(time.Second); h.eject(h.list[1]) },
		input: func(h *tableHarness) {
			c := *h.p.cfg.Load()
			c.MaxEjectedPercent = 0
			h.p.Configure(c)
		}},
	"ejected pushed out gone": {setup: func(h *tableHarness) { h.offList(); h.eject(h.node) },
		input: func(h *tableHarness) { h.pushOut() }},

	"on trial fail ejected": {setup: func(h *tableHarness) { h.eject(h.node); h.sleep(30 * time.Second) },
		input: func(h *tableHarness) { h.fail(h.node) }},
	"on trial fail on trial": {setup: func(h *tableHarness) {
		h.eject(h.node)
		h.sleep(30 * time.Second)
		h.eject(h.list[1])
		h.eject(h.list[2]) // 2 of 4 ejected: the share is reached
	}, input: func(h *tableHarness) { h.fail(h.node) }},
	"on trial reached recovering": {setup: func(h *tableHarness) { h.eject(h.node); h.sleep(30 * time.Second) },
		input: func(h *tableHarness) { h.reach(h.node) }},
	"on trial reached gone": {setup: func(h *tableHarness) { h.eject(h.node); h.sleep(60 * time.Second) },
		input: func(h *tableHarness) { h.reach(h.node) }},
	"on trial idle gone": {setup: func(h *tableHarness) { h.eject(h.node); h.sleep(30*time.Second + 2*time.Minute) },
		input: func(h *tableHarness) { h.sweepNow() }},
	"on trial pushed out gone": {setup: func(h *tableHarness) { h.offList(); h.eject(h.node); h.sleep(30 * time.Second) },
		input: func(h *tableHarness) { h.pushOut() }},

	"recovering fail failing":             {setup: recovering, input: func(h *tableHarness) { h.fail(h.node) }},
	"recovering fail ejected":             {cfg: ejectAfter1, setup: recovering, input: func(h *tableHarness) { h.fail(h.node) }},
	"recovering reached recovering":       {setup: recovering, input: func(h *tableHarness) { h.reach(h.node) }},
	"recovering reached gone":             {setup: recovering, input: func(h *tableHarness) { h.sleep(30 * time.Second); h.reach(h.node) }},
	"recovering idle gone":                {setup: func(h *tableHarness) { recovering(h); h.sleep(2 * time.Minute) }, input: func(h *tableHarness) { h.sweepNow() }},
	"healthy lost limbo":                  {setup: func(h *tableHarness) { h.sel() }, input: func(h *tableHarness) { h.lose() }},
	"recovering lost limbo":               {setup: func(h *tableHarness) { h.sel(); recovering(h) }, input: func(h *tableHarness) { h.lose() }},
	"failing lost failing":                {setup: func(h *tableHarness) { h.sel(); h.fail(h.node) }, input: func(h *tableHarness) { h.lose() }},
	"ejected lost ejected":                {setup: func(h *tableHarness) { h.sel(); h.eject(h.node) }, input: func(h *tableHarness) { h.lose() }},
	"on trial lost on trial":              {setup: func(h *tableHarness) { h.sel(); h.eject(h.node); h.sleep(30 * time.Second) }, input: func(h *tableHarness) { h.lose() }},
	"limbo fail gone":                     {setup: func(h *tableHarness) { h.lose() }, input: func(h *tableHarness) { h.fail(h.node) }},
	"limbo reached limbo reached":         {setup: func(h *tableHarness) { h.lose() }, input: func(h *tableHarness) { h.reach(h.node) }},
	"limbo listed gone":                   {setup: func(h *tableHarness) { h.lose() }, input: func(h *tableHarness) { h.relist() }},
	"limbo bound gone":                    {setup: func(h *tableHarness) { h.lose(); h.sleep(time.Minute) }, input: func(h *tableHarness) { h.sel() }},
	"limbo reached fail gone":             {setup: func(h *tableHarness) { h.lose(); h.reach(h.node) }, input: func(h *tableHarness) { h.fail(h.node) }},
	"limbo reached reached limbo reached": {setup: func(h *tableHarness) { h.lose(); h.reach(h.node) }, input: func(h *tableHarness) { h.reach(h.node) }},
	"limbo reached listed gone":           {setup: func(h *tableHarness) { h.lose(); h.reach(h.node) }, input: func(h *tableHarness) { h.relist() }},
	"limbo reached bound gone":            {setup: func(h *tableHarness) { h.lose(); h.reach(h.node); h.sleep(time.Minute) }, input: func(h *tableHarness) { h.sel() }},
	"recovering pushed out gone":          {setup: func(h *tableHarness) { h.offList(); recovering(h) }, input: func(h *tableHarness) { h.pushOut() }},
}

func cellKey(c cell) string { return fmt.Sprintf("%v %v %v", c.from, c.in, c.to) }

// TestTableCells walks every cell: it brings a node into the cell's state
// through Health's methods and the clock, gives it the cell's input, and
// checks that the node's first move (none for a cell to the same state)
// is the cell's, and that no move the table refuses was made.
func TestTableCells(t *testing.T) {
	for _, c := range table {
		key := cellKey(c)
		t.Run(key, func(t *testing.T) {
			sc, ok := tableScenarios[key]
			require.True(t, ok, "no scenario for the cell %q", key)
			h := newTableHarness(t, sc.cfg)
			sc.setup(h)
			require.Equal(t, c.from, h.stateOf(), "the setup")
			h.moves = nil
			sc.input(h)
			if c.to == c.from {
				assert.Empty(t, h.moves, "an input that leaves the state as it is")
				assert.Equal(t, c.from, h.stateOf())
				return
			}
			require.NotEmpty(t, h.moves, "no move; the node is %v", h.stateOf())
			assert.Equal(t, key, h.moves[0], "all moves: %v", h.moves)
		})
	}
	assert.Len(t, tableScenarios, len(table), "a scenario per cell, and no more")
}

// TestTableNamesEveryPair: every (state, input) pair of a state that is
// not gone is a cell or is named impossible, never both, and no cell
// leaves gone.
func TestTableNamesEveryPair(t *testing.T) {
	cells := map[[2]int]bool{}
	for _, c := range table {
		require.NotEqual(t, stateGone, c.from, "a cell from gone: %v", cellKey(c))
		cells[[2]int{int(c.from), int(c.in)}] = true
	}
	named := map[[2]int]bool{}
	for _, u := range impossible {
		pair := [2]int{int(u.from), int(u.in)}
		assert.False(t, cells[pair], "%v %v is a cell and impossible", u.from, u.in)
		assert.False(t, named[pair], "%v %v named twice", u.from, u.in)
		named[pair] = true
	}
	for s := nodeState(0); s < stateGone; s++ {
		for in := input(0); in < inputs; in++ {
			pair := [2]int{int(s), int(in)}
			assert.True(t, cells[pair] || named[pair], "%v %v is neither a cell nor impossible", s, in)
		}
	}
}

// TestTableRefusesAMoveItLacks: move counts a change that the table does
// not allow, so that every test that checks violations fails on it.
func TestTableRefusesAMoveItLacks(t *testing.T) {
	h := newTableHarness(t, nil)
	h.fail(h.node)
	sh := h.p.lookup("svc")
	sh.mu.Lock()
	sh.move(sh.node(h.node), inEnd, stateTrial) // failing is not ejected
	sh.mu.Unlock()
	assert.EqualValues(t, 1, h.p.violations.Load())
	h.p.violations.Store(0)
}
