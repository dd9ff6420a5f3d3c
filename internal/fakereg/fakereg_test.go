package fakereg

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

var errDown = errors.New("down")

func ids(svcs []*registry.Service) []string {
	out := []string{}
	for _, s := range svcs {
		if s == nil {
			continue
		}
		for _, n := range s.Nodes {
			if n != nil {
				out = append(out, s.Version+"/"+n.Id)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Answers are fresh deep copies of what Set stored, which itself is a
// copy; with SetShared they are the structs given to Set.
func TestAnswersAreFreshCopiesUnlessShared(t *testing.T) {
	r := New()
	s := Service("a", "1", "x")
	r.Set("a", s)
	s.Nodes[0].Id = "changed"
	got, err := r.GetService("a")
	require.NoError(t, err)
	assert.Equal(t, []string{"1/x"}, ids(got), "Set keeps a copy")
	got[0].Nodes[0].Metadata["id"] = "mine"
	again, _ := r.GetService("a")
	assert.Equal(t, "x", again[0].Nodes[0].Metadata["id"], "answers are copies")

	r.SetShared(true)
	r.Set("b", s)
	got, _ = r.GetService("b")
	if got[0] != s {
		t.Error("a shared answer is the struct given to Set")
	}
	assert.Equal(t, 2, r.Calls("a"), "calls of a")
	assert.Equal(t, 3, r.TotalCalls(), "calls in all")
}

// A name with nothing stored is not found, one stored empty answers an
// empty list, SetNodes without ids deletes, and SetAnyName answers every
// name.
func TestMissingEmptyAndAnyName(t *testing.T) {
	r := New()
	if _, err := r.GetService("a"); err != registry.ErrNotFound {
		t.Errorf("missing: %v", err)
	}
	r.Set("a")
	if got, err := r.GetService("a"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	r.SetNodes("b", "x")
	r.SetNodes("b")
	if _, err := r.GetService("b"); err != registry.ErrNotFound {
		t.Errorf("SetNodes without ids: %v", err)
	}
	r.SetAnyName(true)
	got, err := r.GetService("c")
	require.NoError(t, err)
	assert.Equal(t, []string{"1/n"}, ids(got), "any name")
	if r.Held("c") != nil {
		t.Error("Held holds only what is stored")
	}
}

// Register sends create for a new version and update for one held, each
// to the streams of its service only; Deregister sends delete and drops
// what is left without nodes.
func TestRegisterSendsEventsToTheWatchersOfItsService(t *testing.T) {
	r := New()
	all, _ := r.Watch()
	one, _ := r.Watch(registry.WatchService("b"))
	_ = r.Register(Service("a", "1", "x"))
	_ = r.Register(Service("a", "1", "y"))
	_ = r.Register(Service("b", "1", "z"))
	_ = r.Deregister(Service("a", "1", "x", "y"))
	var got []string
	for i := 0; i < 4; i++ {
		res, err := all.Next()
		require.NoError(t, err)
		got = append(got, res.Action+" "+res.Service.Name+" ["+strings.Join(ids([]*registry.Service{res.Service}), " ")+"]")
	}
	assert.Equal(t, []string{"create a [1/x]", "update a [1/y]", "create b [1/z]", "delete a [1/x 1/y]"}, got, "events of every service")
	res, _ := one.Next()
	assert.Equal(t, "create b", res.Action+" "+res.Service.Name, "the watch of b")
	if r.Held("a") != nil {
		t.Error("a version without nodes is dropped")
	}
	assert.Equal(t, []string{"", "b"}, r.Watched(), "watched")
	one.Stop()
	assert.Equal(t, []string{""}, r.Watched(), "watched after Stop")
	if r.WatcherOf("") != all.(*Stream) {
		t.Error("WatcherOf")
	}
}

// A call held by Hold reads its answer when let go; one held by
// HoldAnswers read it before, and gives up when its context is done.
func TestHoldReadsAfterHoldAnswersBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "old")
		var after, before []*registry.Service
		g := r.Hold("a")
		go func() { after, _ = r.GetService("a") }()
		synctest.Wait()
		assert.Equal(t, 1, r.InFlight("a"), "held")
		r.PassThrough()
		if _, err := r.GetService("a"); err != nil {
			t.Error("PassThrough lets later calls pass:", err)
		}
		h := r.HoldAnswers("a")
		go func() { before, _ = r.GetService("a") }()
		synctest.Wait()
		r.SetNodes("a", "new")
		g.Open()
		h.Open()
		synctest.Wait()
		assert.Equal(t, []string{"1/new"}, ids(after), "Hold")
		assert.Equal(t, []string{"1/old"}, ids(before), "HoldAnswers")

		r.HoldAnswers()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := r.GetService("a", registry.GetContext(ctx)); err != context.DeadlineExceeded {
			t.Errorf("HoldAnswers with a context: %v", err)
		}
		r.Release()
		if _, err := r.GetService("a"); err != nil {
			t.Error("Release opens every gate:", err)
		}
	})
}

// A fault is fixed when a call starts; Fail is read when it answers.
func TestFaultsAtTheStartFailAtTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "x")
		r.SetFault(Fault{Latency: time.Second, Err: errDown})
		r.SetFaultFor("b", Fault{})
		r.SetNodes("b", "y")
		var err error
		go func() { _, err = r.GetService("a") }()
		synctest.Wait()
		r.ClearFaults()
		time.Sleep(time.Second)
		synctest.Wait()
		if err != errDown {
			t.Errorf("a fault set at the start: %v", err)
		}
		if _, err := r.GetService("b"); err != nil {
			t.Errorf("SetFaultFor overrides: %v", err)
		}

		g := r.Hold()
		go func() { _, err = r.GetService("a") }()
		synctest.Wait()
		r.Fail(errDown)
		g.Open()
		synctest.Wait()
		if err != errDown {
			t.Errorf("Fail reaches a held call: %v", err)
		}
		r.Fail(nil)

		r.SetFault(Fault{Hang: true})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, err = r.GetService("a", registry.GetContext(ctx)) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		if err != context.Canceled {
			t.Errorf("a hang honours its context: %v", err)
		}
		r.SetFault(Fault{Hang: true, IgnoreCtx: true})
		ctx, cancel = context.WithCancel(context.Background())
		go func() { _, err = r.GetService("a", registry.GetContext(ctx)) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.Equal(t, 1, r.InFlight("a"), "hung, ignoring its context")
		r.ReleaseHangs()
		synctest.Wait()
		if err != ErrHung {
			t.Errorf("released: %v", err)
		}

		r.SetFault(Fault{Unheard: true})
		if got, err := r.GetService("a"); got != nil || err != nil {
			t.Errorf("unheard: %v %v", got, err)
		}
		r.SetFault(Fault{NilEntries: true})
		got, _ := r.GetService("a")
		assert.Equal(t, 4, len(got), "nil entries")
		r.SetFault(Fault{Panic: "boom"})
		func() {
			defer func() {
				if recover() != "boom" {
					t.Error("no panic")
				}
			}()
			_, _ = r.GetService("a")
		}()
		assert.Equal(t, 0, r.InFlight("a"), "a panicking call has ended")
	})
}

// Late returns the answer read before the changes made meanwhile.
func TestLateAnswersAreOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "old")
		r.SetFault(Fault{Late: time.Second})
		var got []*registry.Service
		go func() { got, _ = r.GetService("a") }()
		synctest.Wait()
		r.SetNodes("a", "new")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"1/old"}, ids(got), "late")
	})
}

// ListServices lists names only unless SetListNodes, takes the list fault
// or else the fault of every service, and waits at HoldList with its list.
func TestListServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "x")
		list, _ := r.ListServices()
		assert.Equal(t, 1, len(list), "one version")
		assert.Equal(t, 0, len(list[0].Nodes), "names only")
		r.SetListNodes(true)
		g := r.HoldList()
		go func() { list, _ = r.ListServices() }()
		synctest.Wait()
		r.SetNodes("a", "y")
		g.Open()
		synctest.Wait()
		assert.Equal(t, []string{"1/x"}, ids(list), "held with its list")
		r.SetFault(Fault{Err: errDown})
		if _, err := r.ListServices(); err != errDown {
			t.Errorf("the fault of every service: %v", err)
		}
		r.SetListFault(&Fault{})
		if _, err := r.ListServices(); err != nil {
			t.Errorf("the list fault: %v", err)
		}
		assert.Equal(t, 4, r.ListCalls(), "list calls")
	})
}

// Send returns once the watcher took the event; Break fails a Next in
// progress and every later one; Cut ends the stream, open until stopped.
func TestStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		w, _ := r.Watch()
		s := r.Stream()
		if w.(*Stream) != s {
			t.Fatal("Stream is the newest")
		}
		var got *registry.Result
		go func() { got, _ = s.Next() }()
		s.Send("create", Service("a", "1", "x"))
		synctest.Wait()
		assert.Equal(t, "create", got.Action, "sent")

		var err error
		go func() { _, err = s.Next() }()
		synctest.Wait()
		s.Break(errDown)
		synctest.Wait()
		if err != registry.ErrWatcherStopped {
			t.Errorf("a Next in progress: %v", err)
		}
		if _, err := s.Next(); err != errDown {
			t.Errorf("a later Next: %v", err)
		}
		assert.Equal(t, 0, r.OpenStreams(), "a broken stream is not open")
		s.Stop()
		s.Stop()
		assert.Equal(t, 2, s.Stops(), "stops")

	})
}

func TestOfferToAStoppedStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		w, _ := r.Watch()
		go func() { synctest.Wait(); w.Stop() }()
		if r.Stream().Offer(&registry.Result{Action: "update"}) {
			t.Error("taken by no one")
		}
		w2, _ := r.Watch()
		r.Cut()
		if _, err := w2.Next(); err != registry.ErrWatcherStopped {
			t.Errorf("cut: %v", err)
		}
		assert.Equal(t, 1, r.Report().Open, "a cut stream is open until stopped")
	})
}

// The event faults act on what the stream takes from its queue.
func TestEventFaults(t *testing.T) {
	r := New()
	r.SetWatchFault(WatchFault{Duplicate: 1})
	w, _ := r.Watch()
	_ = r.Register(Service("a", "1", "x"))
	for i := 0; i < 2; i++ {
		res, _ := w.Next()
		assert.Equal(t, "create", res.Action, "duplicated")
	}
	r.SetWatchFault(WatchFault{Reorder: 2})
	_ = r.Register(Service("b", "1", "x"))
	_ = r.Register(Service("c", "1", "x"))
	a, _ := w.Next()
	b, _ := w.Next()
	assert.Equal(t, "cb", a.Service.Name+b.Service.Name, "reordered")
	r.SetWatchFault(WatchFault{BreakErr: errDown, BreakAfter: 3})
	_ = r.Register(Service("d", "1", "x"))
	if _, err := w.Next(); err == nil {
		t.Error("three events were delivered: the stream breaks")
	}
	r.SetWatchFault(WatchFault{WatchErr: errDown})
	if _, err := r.Watch(); err != errDown {
		t.Errorf("Watch: %v", err)
	}
	assert.Equal(t, 2, r.Report().Watches, "Watch calls")
	assert.Equal(t, 3, r.Report().Received, "events received: the fourth was never taken")
}

// A stream that reuses its events scrambles the one it returned last.
func TestReuseScramblesTheLastEvent(t *testing.T) {
	r := New()
	r.SetReuseEvents(true)
	w, _ := r.Watch()
	_ = r.Register(Service("a", "1", "x"))
	_ = r.Register(Service("a", "1", "y"))
	first, _ := w.Next()
	_, _ = w.Next()
	assert.Equal(t, "1-scrambled", first.Service.Version, "scrambled")
}

// The bound: calls for one service never overlap, and at most one comes
// within the interval of the one before, an interval.
func TestBoundViolations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "x")
		r.SetBound(time.Second)
		_, _ = r.GetService("a")
		_, _ = r.GetService("a") // early: allowed once
		assert.Equal(t, 0, r.Report().Violations, "one early call")
		_, _ = r.GetService("a")
		assert.Equal(t, 1, r.Report().Violations, "a second early call")
		g := r.Hold("a")
		go func() { _, _ = r.GetService("a") }()
		synctest.Wait()
		time.Sleep(2 * time.Second)
		_, _ = r.GetService("b")
		go func() { _, _ = r.GetService("a") }()
		synctest.Wait()
		g.Open()
		synctest.Wait()
		rep := r.Report()
		assert.Equal(t, 3, rep.Violations, "the held call came early again, and the last overlapped it")
		assert.Equal(t, 5, rep.MaxCalls, "max calls")
		assert.Equal(t, "a", rep.MaxService, "max service")
		gets, _ := r.StartsSince(time.Now())
		assert.Equal(t, 2, len(gets), "starts since")
	})
}

// errorsTB records what CheckBound reports.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper()                        {}
func (e *errorsTB) Errorf(format string, a ...any) { e.errs = append(e.errs, format) }

// CheckBound fails the test for a violation, and for more calls of one
// service than 2·(1 + elapsed/interval).
func TestCheckBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := New()
		r.SetNodes("a", "x")
		r.SetBound(time.Minute)
		var tb errorsTB
		r.CheckBound(&tb, 0)
		assert.Empty(t, tb.errs, "no call")
		for i := 0; i < 3; i++ {
			_, _ = r.GetService("a")
			time.Sleep(time.Minute)
		}
		r.CheckBound(&tb, 3*time.Minute)
		assert.Empty(t, tb.errs, "three calls an interval apart")
		r.CheckBound(&tb, 0)
		assert.Len(t, tb.errs, 1, "three calls in no time")
	})
}

// A wrapping fake puts its faults, gates and records in front of another
// registry's data and streams, and refuses what acts on its own data.
func TestWrap(t *testing.T) {
	inner := New()
	r := Wrap(inner)
	require.NoError(t, r.Register(Service("a", "1", "x")))
	w, err := r.Watch()
	require.NoError(t, err)
	require.NoError(t, r.Register(Service("a", "1", "y")))
	res, err := w.Next()
	require.NoError(t, err)
	assert.Equal(t, "update", res.Action, "the wrapped registry's event")
	got, err := r.GetService("a")
	require.NoError(t, err)
	assert.Equal(t, []string{"1/x", "1/y"}, ids(got))
	assert.Equal(t, []string{"1/x", "1/y"}, ids(r.Held("a")), "Held asks the wrapped registry")
	assert.Equal(t, 1, r.Calls("a"), "counted in front, and Held is no call")
	r.SetFault(Fault{Err: errDown})
	_, err = r.GetService("a")
	assert.Equal(t, errDown, err)
	r.Cut()
	_, err = w.Next()
	assert.Equal(t, registry.ErrWatcherStopped, err, "cut: the wrapped stream is stopped")
	assert.Panics(t, func() { r.SetNodes("a", "z") })
	assert.Equal(t, "fakereg(fakereg)", r.String())
}
