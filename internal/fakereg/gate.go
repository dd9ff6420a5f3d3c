package fakereg

import (
	"slices"
	"sync"
)

// A Gate holds calls until it is opened, so that a test forces an
// interleaving instead of sleeping for it. A call waits at the newest gate
// installed for its kind of call and its service when it starts; a gate
// stays installed until it is opened, replaced by a gate for the same
// services, or uninstalled by PassThrough.
type Gate struct {
	r     *Registry
	names []string // the services held; none: every service
	// answers: a held GetService call has read its answer, and gives up
	// when its context is done.
	answers bool
	ch      chan struct{}
	once    sync.Once
}

// Open lets the calls held at g go, and uninstalls g if it still is: later
// calls pass. It may be called more than once.
func (g *Gate) Open() {
	g.once.Do(func() {
		g.r.mu.Lock()
		g.r.gates = without(g.r.gates, g)
		g.r.listGates = without(g.r.listGates, g)
		g.r.watchGates = without(g.r.watchGates, g)
		g.r.mu.Unlock()
		close(g.ch)
	})
}

// Hold makes the GetService calls of the named services (of every service
// when none is named) that start from now on wait until the gate is
// opened, before they read anything and whatever their context: a held
// call answers what the registry holds, and fails as it fails, when it is
// let go.
func (r *Registry) Hold(names ...string) *Gate {
	return r.install(&r.gates, names, false)
}

// HoldAnswers is Hold, but a held call has read its answer already (its
// data, or its failure) when it starts to wait, as an answer on its way
// back: let go, it returns what the registry held before the changes made
// meanwhile. A held call gives up with its context's error when the
// context is done first, as registries that honour registry.GetContext do.
func (r *Registry) HoldAnswers(names ...string) *Gate {
	return r.install(&r.gates, names, true)
}

// HoldList makes the ListServices calls that start from now on wait, with
// the list they read, until the gate is opened, whatever their context.
func (r *Registry) HoldList() *Gate {
	return r.install(&r.listGates, nil, false)
}

// HoldWatch makes the Watch calls that start from now on wait until the
// gate is opened, whatever their context. A held call is not yet counted:
// WatchTimes and WatchCalls tell of it once it is let go.
func (r *Registry) HoldWatch() *Gate {
	return r.install(&r.watchGates, nil, false)
}

// PassThrough lets the GetService calls that start from now on pass every
// gate of Hold and HoldAnswers; the calls held already stay held until
// their gate is opened.
func (r *Registry) PassThrough() {
	r.mu.Lock()
	r.gates = nil
	r.mu.Unlock()
}

// Release opens every gate installed, of every kind.
func (r *Registry) Release() {
	r.mu.Lock()
	all := slices.Concat(r.gates, r.listGates, r.watchGates)
	r.mu.Unlock()
	for _, g := range all {
		g.Open()
	}
}

func (r *Registry) install(list *[]*Gate, names []string, answers bool) *Gate {
	g := &Gate{r: r, names: slices.Clone(names), answers: answers, ch: make(chan struct{})}
	slices.Sort(g.names)
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = slices.DeleteFunc(*list, func(old *Gate) bool { return slices.Equal(old.names, g.names) })
	*list = append(*list, g)
	return g
}

// gateFor returns the newest gate of gates that holds name, or nil.
func gateFor(gates []*Gate, name string) *Gate {
	for i := len(gates) - 1; i >= 0; i-- {
		if g := gates[i]; len(g.names) == 0 || slices.Contains(g.names, name) {
			return g
		}
	}
	return nil
}

func without(gates []*Gate, g *Gate) []*Gate {
	return slices.DeleteFunc(gates, func(x *Gate) bool { return x == g })
}
