package core

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/registry"
)

// The driver: random sequences of inputs, fed to the core (through the
// harness, as the shell would) and to the model, which must agree on what
// every lookup returns and which calls go out. A failing sequence is
// shrunk to the shortest that still fails.

var (
	modelSeqs = flag.Int("model.seqs", 10000, "random sequences that TestModel runs")
	modelSeed = flag.Uint64("model.seed", 1, "the first sequence's seed")
)

// op is one kind of step.
type op uint8

const (
	opLookup op = iota
	opAnswer
	opList
	opChange
	opDeliver
	opLose
	opBreak
	opOpen
	opSleep
	opStop
	ops
)

var opNames = [ops]string{"lookup", "answer", "list", "change", "deliver", "lose", "break", "open", "sleep", "stop"}

// step is one input of a sequence. Its fields are read as op says.
type step struct {
	op   op
	svc  int           // a service: lookup, answer, change
	kind int           // how to answer (answer, list; lookup after Stop), add or remove (change)
	node int           // which node (change)
	i    int           // which event (deliver, lose)
	d    time.Duration // sleep
}

var (
	services = []string{"a", "b", "c"}
	nodeIDs  = []string{"n1", "n2", "n3"}
	sleeps   = []time.Duration{time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second, 6 * time.Second, 70 * time.Second}
)

// Answer kinds.
const (
	answerNow   = iota // what the registry holds now (not found if nothing)
	answerStale        // what it held when the call started
	answerFail
	answerHang // nothing: the call stays out
	answerKinds
)

func (s step) String() string {
	switch s.op {
	case opLookup, opAnswer:
		return fmt.Sprintf("%s %s %d", opNames[s.op], services[s.svc], s.kind)
	case opList:
		return fmt.Sprintf("list %d", s.kind)
	case opChange:
		return fmt.Sprintf("change %s %d %s", services[s.svc], s.kind, nodeIDs[s.node])
	case opDeliver, opLose:
		return fmt.Sprintf("%s %d", opNames[s.op], s.i)
	case opSleep:
		return fmt.Sprintf("sleep %v", s.d)
	}
	return opNames[s.op]
}

// parseStep reads a step as String writes it.
func parseStep(line string) (step, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return step{}, errors.New("empty step")
	}
	o := slices.Index(opNames[:], f[0])
	if o < 0 {
		return step{}, fmt.Errorf("no op %q", f[0])
	}
	s := step{op: op(o)}
	num := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
	switch s.op {
	case opLookup, opAnswer:
		s.svc, s.kind = slices.Index(services, f[1]), num(2)
	case opList:
		s.kind = num(1)
	case opChange:
		s.svc, s.kind, s.node = slices.Index(services, f[1]), num(2), slices.Index(nodeIDs, f[3])
	case opDeliver, opLose:
		s.i = num(1)
	case opSleep:
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return step{}, err
		}
		s.d = d
	}
	return s, nil
}

// randomSteps makes a sequence of n steps from rng.
func randomSteps(rng *rand.Rand, n int) []step {
	weights := [ops]int{opLookup: 30, opAnswer: 18, opList: 3, opChange: 16, opDeliver: 14, opLose: 2, opBreak: 2, opOpen: 3, opSleep: 12, opStop: 0}
	total := 0
	for _, w := range weights {
		total += w
	}
	steps := make([]step, 0, n+1)
	for len(steps) < n {
		r := rng.IntN(total)
		o := op(0)
		for ; r >= weights[o]; o++ {
			r -= weights[o]
		}
		steps = append(steps, step{op: o, svc: rng.IntN(len(services)), kind: rng.IntN(answerKinds),
			node: rng.IntN(len(nodeIDs)), i: rng.IntN(4), d: sleeps[rng.IntN(len(sleeps))]})
	}
	if rng.IntN(4) == 0 {
		// Stop, then a few more lookups and answers.
		at := rng.IntN(len(steps))
		steps = slices.Insert(steps, at, step{op: opStop})
	}
	return steps
}

// modelConfig is the configuration the model describes.
func modelConfig() Config {
	cfg := testConfig()
	cfg.ProbeInterval = 0
	cfg.BulkMin = 2
	return cfg
}

// world runs one sequence.
type world struct {
	h *harness
	m *model
	// reg is what the registry holds, and version counts its changes, for
	// the addresses; stream holds the events not yet delivered, of a
	// stream that is up.
	reg     map[string]nodes
	version int
	up      bool
	stream  []streamEvent
	// seen are the calls the model has recorded; at are the registry's
	// contents when each started.
	seen map[*Call]bool
	at   map[*Call]map[string]nodes
	err  error
}

type streamEvent struct {
	svc string
	ev  mEvent
}

func newWorld(t testing.TB) *world {
	h := newHarness(t, modelConfig())
	h.lenient = true
	return &world{h: h, m: newModel(modelConfig()), reg: map[string]nodes{}, seen: map[*Call]bool{}, at: map[*Call]map[string]nodes{}}
}

func (w *world) failf(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("at %v: %s", w.h.now.Sub(w.h.k.cfg.Base.Add(time.Hour)), fmt.Sprintf(format, args...))
	}
}

// run runs steps and returns the first disagreement, with the step it
// came at.
func (w *world) run(steps []step) error {
	w.open()
	for i, s := range steps {
		w.step(s)
		w.check()
		if w.err != nil {
			return fmt.Errorf("step %d (%v): %w", i, s, w.err)
		}
	}
	return nil
}

func (w *world) snapshotReg() map[string]nodes {
	out := map[string]nodes{}
	for k, v := range w.reg {
		out[k] = maps.Clone(v)
	}
	return out
}

// observe records the calls the core started since the last look, in the
// order they started, foreground being the one a lookup made.
func (w *world) observe(foreground *Call) {
	var fresh []*Call
	for _, c := range w.h.out {
		if !w.seen[c] {
			fresh = append(fresh, c)
		}
	}
	if foreground != nil && !w.seen[foreground] && !slices.Contains(fresh, foreground) {
		fresh = append(fresh, foreground)
	}
	slices.SortStableFunc(fresh, func(a, b *Call) int { return a.Started.Compare(b.Started) })
	for _, c := range fresh {
		if !w.m.stopped {
			w.m.sweep(c.Started)
		}
		w.seen[c] = true
		w.at[c] = w.snapshotReg()
		if err := w.m.started(c, c == foreground); err != nil {
			w.failf("%v", err)
		}
	}
}

func (w *world) open() {
	w.h.open()
	w.up, w.stream = true, nil
	w.m.opened(w.h.now)
	w.observe(nil)
}

func (w *world) step(s step) {
	h, m := w.h, w.m
	name := services[s.svc]
	switch s.op {
	case opLookup:
		var got Read
		if s.node == 0 {
			got = h.hit(name) // the lock-free path, where the mode allows
		} else {
			got = h.k.Lookup(name, First, h.now)
			h.take()
		}
		wanted := m.lookup(name, h.now)
		w.observe(got.Call)
		w.compareRead(name, got, wanted)
		if got.Run {
			w.answer(got.Call, s.kind%3) // made by the caller: it ends
		}
	case opAnswer:
		if c := h.call(name); c != nil && s.kind != answerHang {
			w.answer(c, s.kind)
		}
	case opList:
		if c := h.list(); c != nil {
			w.answerList(c, s.kind)
		}
	case opChange:
		n := nodeIDs[s.node]
		cur := maps.Clone(w.reg[name])
		if cur == nil {
			cur = nodes{}
		}
		w.version++
		var ev mEvent
		if s.kind == 3 && len(cur) > 1 {
			// The whole service deregisters: one delete of every node.
			w.reg[name] = nodes{}
			if w.up {
				w.stream = append(w.stream, streamEvent{name, mEvent{action: "delete", all: slices.Sorted(maps.Keys(cur))}})
			}
			return
		}
		if s.kind%2 == 0 {
			addr := fmt.Sprintf("%s:%d", n, w.version)
			cur[n] = addr
			ev = mEvent{action: []string{"create", "update"}[w.version%2], id: n, addr: addr}
		} else {
			delete(cur, n)
			ev = mEvent{action: "delete", id: n, addr: fmt.Sprintf("%s:0", n)}
		}
		w.reg[name] = cur
		if w.up {
			w.stream = append(w.stream, streamEvent{name, ev})
		}
	case opDeliver:
		if len(w.stream) > 0 && w.up {
			i := s.i % len(w.stream)
			if s.i%3 != 0 {
				i = 0 // mostly in order
			}
			e := w.stream[i]
			w.stream = slices.Delete(w.stream, i, i+1)
			e.ev.at = h.now
			svc := &registry.Service{Name: e.svc, Version: "1", Nodes: []*registry.Node{{Id: e.ev.id, Address: e.ev.addr}}}
			if e.ev.all != nil {
				svc.Nodes = nil
				for _, id := range e.ev.all {
					svc.Nodes = append(svc.Nodes, &registry.Node{Id: id, Address: id + ":0"})
				}
			}
			h.event(e.ev.action, svc)
			m.event(e.svc, e.ev)
			w.observe(nil)
		}
	case opLose:
		if len(w.stream) > 0 {
			i := s.i % len(w.stream)
			w.stream = slices.Delete(w.stream, i, i+1)
		}
	case opBreak:
		if w.up {
			h.lose(errDown)
			w.up, w.stream = false, nil
			w.observe(nil)
		}
	case opOpen:
		if !w.up && !m.stopped {
			w.open()
		}
	case opSleep:
		h.sleep(s.d)
		w.observe(nil)
	case opStop:
		if m.stopped {
			return
		}
		h.k.Stop(h.now)
		h.take()
		m.stop()
		for _, c := range slices.Clone(h.out) {
			if c.List {
				h.answerList(c, nil, ErrCancelled, nil)
				m.listed(c, nil, h.now)
				continue
			}
			h.cancel(c)
			svcs, err := m.answered(c, outcome{cancelled: true}, h.now)
			w.compareResult(c, svcs, err)
		}
	}
}

// answer answers c as kind says.
func (w *world) answer(c *Call, kind int) {
	h := w.h
	var o outcome
	switch kind {
	case answerNow, answerStale:
		o.nodes = w.reg[c.Name]
		if kind == answerStale {
			o.nodes = w.at[c][c.Name]
		}
		if len(o.nodes) == 0 {
			o.nodes, o.notFound = nil, true
		}
	default:
		o.err = errDown
	}
	var svcs []*registry.Service
	var err error
	switch {
	case o.err != nil:
		err = o.err
	case o.notFound:
		err = registry.ErrNotFound
	default:
		svcs = []*registry.Service{asService(c.Name, o.nodes)}
	}
	h.forget(c)
	w.seen[c] = true
	h.answer(c, svcs, err)
	wantSvcs, wantErr := w.m.answered(c, o, h.now)
	w.compareResult(c, wantSvcs, wantErr)
	w.observe(nil)
}

// answerList answers list c with what the registry holds now, or fails.
func (w *world) answerList(c *Call, kind int) {
	h := w.h
	if kind == answerFail || kind == answerHang {
		h.answerList(c, nil, errDown, nil)
		w.m.listed(c, nil, h.now)
		w.observe(nil)
		return
	}
	var list []*registry.Service
	listed := map[string]nodes{}
	for _, name := range services {
		if n := w.reg[name]; len(n) > 0 {
			list = append(list, asService(name, n))
			listed[name] = maps.Clone(n)
		}
	}
	h.answerList(c, list, nil, nil)
	w.m.listed(c, listed, h.now)
	w.observe(nil)
}

func asService(name string, n nodes) *registry.Service {
	s := &registry.Service{Name: name, Version: "1"}
	for _, id := range slices.Sorted(maps.Keys(n)) {
		s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: n[id]})
	}
	return s
}

// compareRead checks a lookup's result against the model's.
func (w *world) compareRead(name string, got Read, want want) {
	switch {
	case want.data != nil:
		if got.Err != nil || got.Call != nil || !maps.Equal(nodesOf(got.Services), want.data) || got.Services == nil {
			w.failf("lookup %s: got %v %v (call %v), want %v", name, nodesOf(got.Services), got.Err, got.Call != nil, want.data)
		}
	case want.join != nil:
		if got.Call != want.join {
			w.failf("lookup %s: got %v %v, want to join the call out", name, nodesOf(got.Services), got.Err)
		}
	case want.start:
		if got.Call == nil {
			w.failf("lookup %s: got %v %v, want a call", name, nodesOf(got.Services), got.Err)
		}
	default:
		if got.Call != nil || got.Services != nil {
			w.failf("lookup %s: got %v (call %v), want %v", name, nodesOf(got.Services), got.Call != nil, want.err)
		} else if err := errCheck(got.Err, want.err); err != nil {
			w.failf("lookup %s: %v", name, err)
		}
	}
}

// compareResult checks what the waiters of call c get.
func (w *world) compareResult(c *Call, svcs nodes, err error) {
	if e := errCheck(c.Err, err); e != nil {
		w.failf("call %s: its waiters get %v, %v", c.Name, nodesOf(c.Services), e)
	}
	if err == nil && !maps.Equal(nodesOf(c.Services), svcs) {
		w.failf("call %s: its waiters get %v, want %v", c.Name, nodesOf(c.Services), svcs)
	}
}

// check compares the core's entries with the model's, and the calls owed.
func (w *world) check() {
	h, m := w.h, w.m
	if h.k.Violations > 0 {
		w.failf("a move the table does not allow: %v", h.logs)
	}
	if !m.stopped {
		m.sweep(h.now)
	}
	for _, name := range services {
		e, s := h.k.Find(name), m.svc(name)
		if e == nil && s.held && s.data == nil && s.call == nil && !s.owed.IsZero() && !m.until(s).After(h.now) {
			// Its time came before the resync put it in line.
			*s = mSvc{}
		}
		if s.held && s.data != nil && (e == nil || e.Data.Load() == nil) {
			if err := m.believe(s, h.now); err != nil {
				w.failf("%s: %v", name, err)
			}
		}
		switch {
		case (e != nil) != s.held:
			w.failf("%s: held by the core %v, by the model %v (model until %v)", name, e != nil, s.held, m.until(s).Sub(h.now))
			continue
		case e == nil:
			continue
		}
		if got := nodesOf(e.Services()); !maps.Equal(got, s.data) || (got == nil) != (s.data == nil) {
			w.failf("%s: the core holds %v, the model %v", name, got, s.data)
		}
		if (e.Call() != nil) != (s.call != nil) {
			w.failf("%s: a call out for the core %v, for the model %v", name, e.Call() != nil, s.call != nil)
		}
		if !s.owed.IsZero() && h.now.After(s.owed) && s.call == nil {
			w.failf("%s: a call owed by %v did not go", name, h.now.Sub(s.owed))
		}
	}
}

// TestModel feeds random sequences to the core and the model.
func TestModel(t *testing.T) {
	n := *modelSeqs
	if testing.Short() {
		n = min(n, 2000)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		seed := *modelSeed + uint64(i)
		rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		steps := randomSteps(rng, 20+rng.IntN(60))
		if err := newWorld(t).run(steps); err != nil {
			short, serr := shrink(t, steps)
			t.Fatalf("seed %d: %v\nshrunk to %d steps:\n%s\n%v", seed, err, len(short), formatSteps(short), serr)
		}
	}
	t.Logf("%d sequences in %v", n, time.Since(start).Round(time.Millisecond))
}

// TestModelRegressions replays the sequences kept in testdata/model, each
// once a failure the driver found and shrank.
func TestModelRegressions(t *testing.T) {
	files, _ := filepath.Glob("testdata/model/*.txt")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var steps []step
			for _, line := range strings.Split(string(data), "\n") {
				if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				s, err := parseStep(line)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				steps = append(steps, s)
			}
			if err := newWorld(t).run(steps); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// shrink removes steps from a failing sequence while it still fails.
func shrink(t testing.TB, steps []step) ([]step, error) {
	fails := func(s []step) error { return newWorld(t).run(s) }
	err := fails(steps)
	for chunk := len(steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(steps); {
			try := slices.Concat(steps[:i], steps[i+chunk:])
			if e := fails(try); e != nil {
				steps, err = try, e
				continue
			}
			i += chunk
		}
	}
	return steps, err
}

func formatSteps(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	return b.String()
}
