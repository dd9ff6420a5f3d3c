package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/regcache/cache/internal/svcdata"
)

// An event prepared against an entry that was dropped, and whose name a
// new entry took, before the event reached the core, applies to the new
// entry: the event names a service, not an entry. (Held off a suspicion:
// the shell found the entry, unlocked to prepare the event, and dropped
// it if the entry had been made anew meanwhile.)
func TestAnEventAppliesToTheEntryThatHoldsItsNameNow(t *testing.T) {
	h := newHarness(t, testConfig())
	h.open()
	r := h.lookup("svc")
	h.answer(r.Call, nil, registry.ErrNotFound)
	old := h.k.Find("svc")
	// Prepared against the old entry, which holds nothing.
	res := &registry.Result{Action: "create", Service: fakereg.Service("svc", "1", "n1")}
	p := svcdata.Prepare(res, old.Data.Load(), false, nil)
	h.sleep(time.Minute) // the old entry goes with its window
	require.Equal(t, PhaseGone, old.Phase())
	r = h.lookup("svc") // a new entry, its call out
	require.NotNil(t, r.Call)
	h.k.Event(res, &p, old, nil, nil, h.now)
	h.take()
	assert.Equal(t, []string{"n1"}, h.nodesOf("svc"), "servable at once, as any create for a service held")
}

// A ListServices call that lags (etcd's serializable read from a member
// behind) and lists the node a delete left the service without does not
// stand for the registry's confirmation: the service keeps its last
// nodes through the grace, and its own call confirms the delete after it.
func TestALaggingListLeavesAnEmptiedServiceToItsConfirmation(t *testing.T) {
	h, names, c := listed(t, 10, testConfig())
	h.answerList(c, fullList(names, "n1"), nil, nil)
	svc := names[0]
	h.sleep(10 * time.Second)
	h.event("delete", fakereg.Service(svc, "1", "n1"))
	require.Equal(t, svcdata.Emptied, h.k.Find(svc).Data.Load().Hold)
	h.k.Resync(h.now)
	h.take()
	c = h.list()
	require.NotNil(t, c, "a list after the delete")
	h.answerList(c, fullList(names, "n1"), nil, nil) // lagging: n1 is still listed
	assert.Equal(t, svcdata.Emptied, h.k.Find(svc).Data.Load().Hold, "the list did not confirm the delete")
	calls := h.started[svc]
	h.sleep(ReplacementGrace)
	require.Equal(t, calls+1, h.started[svc], "the confirmation goes after the grace")
	h.answer(h.call(svc), nil, registry.ErrNotFound)
	r := h.lookup(svc)
	assert.ErrorIs(t, r.Err, registry.ErrNotFound, "confirmed: gone")
}

// A resync re-validates every entry, with data or without: a service that
// was not found before the stream was established may have registered in
// the gap, unseen. Its call is the early one its window allows.
func TestAResyncRevalidatesEntriesWithoutData(t *testing.T) {
	h := newHarness(t, testConfig())
	h.open()
	r := h.lookup("late")
	h.answer(r.Call, nil, registry.ErrNotFound)
	require.Equal(t, PhaseAbsent, h.k.Find("late").Phase())
	h.lose(errDown)
	h.sleep(time.Second)
	h.open() // back: a resync
	c := h.call("late")
	require.NotNil(t, c, "re-validated at once, inside its window")
	h.answer(c, []*registry.Service{fakereg.Service("late", "1", "l1")}, nil)
	r = h.lookup("late")
	assert.Equal(t, []string{"l1"}, ids(r.Services))
	assert.Equal(t, 2, h.started["late"])

	// Not found again: kept for its new window, then dropped.
	h.lose(errDown)
	h.sleep(time.Second)
	r = h.lookup("gone")
	h.answer(r.Call, nil, registry.ErrNotFound)
	h.open()
	h.answer(h.call("gone"), nil, registry.ErrNotFound)
	require.Equal(t, PhaseAbsent, h.k.Find("gone").Phase())
	h.sleep(h.k.cfg.MinimumRetryInterval)
	assert.Nil(t, h.k.Find("gone"), "dropped at the end of its window")
}

var errDown = errorString("registry down")

type errorString string

func (e errorString) Error() string { return string(e) }

// The last nodes a delete left are the service's as the delete found it:
// a later delete of some of them changes nothing, and the grace runs from
// the delete that emptied the service. Only a create replaces them.
func TestDeletesLeaveTheLastNodesAsTheyAre(t *testing.T) {
	h := newHarness(t, testConfig())
	h.open()
	r := h.lookup("svc")
	h.answer(r.Call, []*registry.Service{fakereg.Service("svc", "1", "n1", "n2")}, nil)
	h.event("delete", fakereg.Service("svc", "1", "n1", "n2"))
	require.Equal(t, svcdata.Emptied, h.k.Find("svc").Data.Load().Hold)
	h.sleep(100 * time.Millisecond)
	h.event("delete", fakereg.Service("svc", "1", "n1"))
	e := h.k.Find("svc")
	assert.Equal(t, svcdata.Emptied, e.Data.Load().Hold)
	assert.Equal(t, []string{"n1", "n2"}, ids(e.Services()))
	calls := h.started["svc"]
	h.sleep(ReplacementGrace - 100*time.Millisecond)
	assert.Equal(t, calls+1, h.started["svc"], "confirmed a grace after the delete that emptied it")
}
