package core

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go-micro.dev/v4/registry"
)

// A reference model of the contract (SPEC.md), for the configuration the
// driver runs: one version of each service, a TTL, a retry window, no
// registry-wide health, no jitter, no refresh ahead, no MaxStale, no
// last known nodes. It keeps, per service, what the cache was told (the
// registry's answers, as the driver gives them, and the events delivered)
// and the retry window, in plain maps, with no concern for speed, and
// says what every lookup must return and which registry calls may go out
// and which must.
//
// Where the contract leaves a choice to the cache (when exactly a
// background refresh starts, within a resync's wait for its list), the
// model checks the choice instead of making it: a call the cache starts
// must be allowed; a call the contract owes must start in time.

// slack is how long a call the contract owes may wait: a resync waits for
// its list for SlowCall at most, and a resync that comes meanwhile waits
// for the one running, then for its own list.
const slack = 2*SlowCall + time.Millisecond

// nodes is a service's data as the model keeps it: node id → address.
type nodes map[string]string

// mEvent is one watch event as the model sees it: one node of the one
// version.
type mEvent struct {
	action   string
	id, addr string
	// all, for a delete, names every node it deletes, in place of id.
	all []string
	at  time.Time
}

// mCall is a registry call out.
type mCall struct {
	c         *Call
	epoch     uint64
	prev      time.Time // the service's last attempt before it
	events    []mEvent
	deleteAt  time.Time
	listNodes map[string]nodes // a list's answer, by service
	svcEvents map[string][]mEvent
	// entries are the entries a list may settle: those held when it
	// started, by their generation.
	entries map[string]int
}

// mSvc is one service as the cache should hold it.
type mSvc struct {
	held bool
	// gen numbers the entry among those that held the service's name.
	gen  int
	data nodes // nil: none
	// emptied: data are the last nodes a delete left, since emptiedAt.
	emptied   bool
	emptiedAt time.Time
	// expires is when the data turn stale (zero: stale from the start).
	expires time.Time
	// epoch is the resync epoch of the call that fetched the data (or
	// answered not found); seq its number.
	epoch, seq uint64
	// lastAttempt and early are the throttle's; failed is set while the
	// last call failed.
	lastAttempt time.Time
	early       bool
	failed      bool
	// keep is when an entry without data goes, its window aside; absent
	// is set while it waits for that (forget).
	keep   time.Time
	absent bool
	call   *mCall
	// owed is when a call (or, for emptied data, a call or the delete
	// believed) is owed by; zero: none.
	owed time.Time
	// drop, once the core has dropped the entry (time.Time of the drop).
}

type model struct {
	cfg     Config
	svcs    map[string]*mSvc
	epoch   uint64
	stopped bool
	lists   []*mCall
	gens    int
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg, svcs: map[string]*mSvc{}}
}

func (m *model) svc(name string) *mSvc {
	s := m.svcs[name]
	if s == nil {
		s = &mSvc{}
		m.svcs[name] = s
	}
	return s
}

// window reports whether s's retry window has closed at now.
func (m *model) windowClosed(s *mSvc, now time.Time) bool {
	return s.lastAttempt.IsZero() || now.Sub(s.lastAttempt) >= m.cfg.MinimumRetryInterval
}

// inDoubt reports whether s's data (or its not-found) may have missed
// changes: fetched before the last resync, or emptied by a delete. A
// resync re-validates it.
func (m *model) inDoubt(s *mSvc) bool { return s.epoch < m.epoch }

// doubted reports whether s is in doubt since an answer: the failure of a
// call is no answer, and gives no early call.
func (m *model) doubted(s *mSvc) bool { return !s.failed && m.inDoubt(s) }

// allowed reports whether a call for s may start at now: its window, or
// the one early call that a doubt allows after a call that was not early.
func (m *model) allowed(s *mSvc, now time.Time) bool {
	return m.windowClosed(s, now) || m.doubted(s) && !s.early
}

func (m *model) graceEnd(s *mSvc) time.Time { return s.emptiedAt.Add(ReplacementGrace) }

// until is when an entry without data goes.
func (m *model) until(s *mSvc) time.Time {
	u := s.lastAttempt.Add(m.cfg.MinimumRetryInterval)
	if s.keep.After(u) {
		u = s.keep
	}
	return u
}

// sweep drops the entries without data whose time has come by now.
func (m *model) sweep(now time.Time) {
	for name, s := range m.svcs {
		if s.held && s.absent && s.data == nil && s.call == nil && s.owed.IsZero() && !m.until(s).After(now) {
			m.svcs[name] = &mSvc{}
		}
	}
}

// lookup says what a lookup of name at now must return: the data, the
// call it joins or starts (start), or the error.
type want struct {
	data  nodes
	join  *Call
	start bool
	err   error
}

func (m *model) lookup(name string, now time.Time) want {
	m.sweep(now)
	s := m.svc(name)
	if !s.held {
		m.gens++
		s.held, s.gen = true, m.gens
	}
	switch {
	case s.data != nil:
		if !now.Before(s.expires) && s.call == nil && !m.stopped && m.allowed(s, now) && !s.emptied {
			m.owe(s, now)
		}
		return want{data: s.data}
	case s.call != nil:
		return want{join: s.call.c}
	case m.allowed(s, now):
		return want{start: true}
	case s.failed:
		return want{err: ErrThrottled}
	default:
		return want{err: registry.ErrNotFound}
	}
}

// started records call c of the cache, checking that the contract allows
// it at its start.
func (m *model) started(c *Call, foreground bool) error {
	now := c.Started
	if c.List {
		l := &mCall{c: c, epoch: m.epoch, svcEvents: map[string][]mEvent{}, entries: map[string]int{}}
		for name, s := range m.svcs {
			if s.held {
				l.entries[name] = s.gen
			}
		}
		m.lists = append(m.lists, l)
		return nil
	}
	s := m.svcs[c.Name]
	switch {
	case s == nil || !s.held:
		return fmt.Errorf("a call for %s, which the cache does not hold", c.Name)
	case s.call != nil:
		return fmt.Errorf("a second call for %s while one is out", c.Name)
	case m.stopped && !foreground:
		return fmt.Errorf("a background call for %s after Stop", c.Name)
	case !m.allowed(s, now):
		return fmt.Errorf("a call for %s inside its window (last attempt %v before, early %v, doubted %v)",
			c.Name, now.Sub(s.lastAttempt), s.early, m.doubted(s))
	case s.emptied && now.Before(m.graceEnd(s)):
		return fmt.Errorf("a call for %s inside the grace of the delete that emptied it", c.Name)
	case !foreground && s.data != nil && now.Before(s.expires) && !m.inDoubt(s):
		return fmt.Errorf("a background call for %s, whose data is fresh and not in doubt", c.Name)
	}
	s.call = &mCall{c: c, epoch: m.epoch, prev: s.lastAttempt}
	s.absent = false
	s.early = !m.windowClosed(s, now)
	s.lastAttempt = now
	s.owed = time.Time{}
	return nil
}

// event records a watch event delivered to the cache.
func (m *model) event(name string, ev mEvent) {
	s := m.svcs[name]
	if s == nil || !s.held {
		return
	}
	if s.call != nil {
		s.call.events = append(s.call.events, ev)
		if ev.action == "delete" {
			s.call.deleteAt = ev.at
		}
	}
	for _, l := range m.lists {
		l.svcEvents[name] = append(l.svcEvents[name], ev)
	}
	switch {
	case s.data == nil:
		if ev.action != "delete" {
			// Announced on the stream as it is now: not in doubt, and
			// confirmed at its next lookup.
			s.data = nodes{ev.id: ev.addr}
			s.expires, s.emptied, s.epoch, s.absent, s.owed = time.Time{}, false, m.epoch, false, time.Time{}
		}
	case s.emptied:
		if ev.action != "delete" {
			// The create replaces the last nodes, still in doubt: the
			// re-validation goes once the grace is over.
			end := m.graceEnd(s)
			s.data = nodes{ev.id: ev.addr}
			s.expires, s.emptied, s.owed = time.Time{}, false, time.Time{}
			if !m.stopped {
				m.owe(s, maxTime(ev.at, end))
			}
		}
	default:
		next := apply(s.data, ev)
		if len(next) == 0 {
			m.empty(s, s.data, ev.at, ev.at)
			return
		}
		if !maps.Equal(next, s.data) {
			s.data = next
		}
	}
}

// empty is the rule of a delete that leaves s with no node: the last
// nodes are served until a create, or the confirmation after the grace.
func (m *model) empty(s *mSvc, last nodes, at, now time.Time) {
	s.data, s.emptied, s.emptiedAt, s.expires, s.epoch = last, true, at, time.Time{}, 0
	if !m.stopped {
		// By the grace's end (the delete may have come long before an
		// answer it emptied): a call, or the delete believed.
		s.owed = maxTime(m.graceEnd(s), now).Add(slack)
	}
}

// believe records that the cache believed the delete that emptied s,
// which its window kept from being confirmed: s is kept without data for
// its window.
func (m *model) believe(s *mSvc, now time.Time) error {
	end := m.graceEnd(s)
	switch {
	case !s.emptied:
		return fmt.Errorf("dropped its data, which no delete left")
	case now.Before(end):
		return fmt.Errorf("dropped the last nodes a delete left inside the grace")
	case m.allowed(s, end):
		return fmt.Errorf("believed the delete without the confirmation its gate allowed")
	}
	s.data, s.emptied, s.owed = nil, false, time.Time{}
	m.forget(s, time.Time{}, now)
	return nil
}

// apply applies ev to data and returns the result, leaving data as it is.
func apply(data nodes, ev mEvent) nodes {
	next := maps.Clone(data)
	if next == nil {
		next = nodes{}
	}
	if ev.action == "delete" {
		delete(next, ev.id)
		for _, id := range ev.all {
			delete(next, id)
		}
	} else {
		next[ev.id] = ev.addr
	}
	return next
}

// outcome is how the driver ends a call.
type outcome struct {
	nodes     nodes // found, when not nil and not empty
	notFound  bool
	err       error
	cancelled bool
}

// answered records c's end at now, and says what its waiters get.
func (m *model) answered(c *Call, o outcome, now time.Time) (svcs nodes, err error) {
	s := m.svcs[c.Name]
	mc := s.call
	s.call = nil
	if !o.cancelled {
		s.owed = time.Time{}
	}
	switch {
	case o.cancelled:
		s.lastAttempt = mc.prev
		m.forget(s, time.Time{}, now)
		return nil, ErrCancelled
	case o.err != nil:
		s.lastAttempt, s.failed = now, true
		defer m.requeue(s, s.epoch, now)
		if s.emptied && !m.stopped {
			// Its confirmation failed: a call or the delete believed,
			// once the grace is over.
			s.owed = maxTime(m.graceEnd(s), now).Add(slack)
		}
		if s.data != nil {
			return s.data, nil
		}
		s.epoch = max(s.epoch, mc.epoch)
		m.forget(s, now.Add(max(m.cfg.MinimumRetryInterval, failureMemory)), now)
		return nil, o.err
	}
	s.lastAttempt, s.failed = now, false
	defer func() {
		m.requeue(s, s.epoch, now)
		m.forget(s, time.Time{}, now)
	}()
	if c.ID < s.seq {
		if s.data == nil {
			return nil, registry.ErrNotFound
		}
		return s.data, nil
	}
	s.seq = c.ID
	return m.store(s, mc.epoch, o.nodes, mc.events, mc.deleteAt, now)
}

// forget keeps s, if it holds no data, until until or the end of its
// window, whichever is later (and, while it fails, the time it was to go
// before), and drops it at once if that time has come.
func (m *model) forget(s *mSvc, until, now time.Time) {
	if s.data != nil {
		return
	}
	if w := s.lastAttempt.Add(m.cfg.MinimumRetryInterval); w.After(until) {
		until = w
	}
	if s.keep.After(until) && s.failed {
		until = s.keep
	}
	s.keep, s.absent = until, true
	if !until.After(now) {
		*s = mSvc{}
	}
}

// store stores an answer (of a call or a list) with the events that raced
// it replayed, and returns what it serves.
func (m *model) store(s *mSvc, epoch uint64, answer nodes, events []mEvent, deleteAt, now time.Time) (nodes, error) {
	fresh := maps.Clone(answer)
	last := fresh
	for _, ev := range events {
		next := apply(fresh, ev)
		if len(next) == 0 && len(fresh) > 0 {
			last = fresh
		}
		fresh = next
	}
	switch {
	case len(fresh) > 0:
		s.data, s.emptied, s.expires, s.epoch, s.absent = fresh, false, now.Add(m.cfg.TTL), epoch, false
		return fresh, nil
	case len(answer) > 0:
		if !s.emptied {
			at := deleteAt
			if at.IsZero() {
				at = now
			}
			m.empty(s, last, at, now)
		} else {
			s.epoch = 0
		}
		return s.data, nil
	default:
		s.data, s.emptied, s.epoch = nil, false, epoch
		return nil, registry.ErrNotFound
	}
}

// requeue owes s, whose call has just ended, a call if its data is in
// doubt (epoch is the epoch its data has now, or of the call for a
// failure): at once if its gate allows, at the end of its window if not.
func (m *model) requeue(s *mSvc, epoch uint64, now time.Time) {
	if s.data == nil || s.emptied || m.stopped || epoch >= m.epoch {
		return
	}
	m.owe(s, now)
}

// owe owes s a call: at once if its gate allows one at now, otherwise at
// the end of its window. A resync's wait for its list may hold it back for
// SlowCall.
func (m *model) owe(s *mSvc, now time.Time) {
	at := now
	if !m.allowed(s, now) {
		at = s.lastAttempt.Add(m.cfg.MinimumRetryInterval)
	}
	if at = at.Add(slack); s.owed.IsZero() || at.Before(s.owed) {
		s.owed = at
	}
}

// opened records a stream established at now: a resync, which owes every
// entry in doubt its re-validation.
func (m *model) opened(now time.Time) {
	m.epoch++
	for _, s := range m.svcs {
		switch {
		case !s.held || s.call != nil || m.stopped || s.emptied:
		case s.data != nil:
			m.owe(s, now)
		case m.allowed(s, now):
			// Without data, only the early call goes (refused, it keeps
			// its window). The resync may put it in line before its time
			// to go comes (then it stays for the call) or after (then it
			// goes): check allows either.
			m.owe(s, now)
		}
	}
}

// listed records the answer of list c: services listed with nodes, by
// name (nil for a failure).
func (m *model) listed(c *Call, listed map[string]nodes, now time.Time) {
	i := slices.IndexFunc(m.lists, func(l *mCall) bool { return l.c == c })
	l := m.lists[i]
	m.lists = slices.Delete(m.lists, i, i+1)
	for name, answer := range listed {
		s := m.svcs[name]
		if s == nil || !s.held || l.entries[name] != s.gen || s.call != nil || c.ID < s.seq || s.emptied {
			continue
		}
		s.failed, s.seq = false, c.ID
		m.store(s, l.epoch, answer, l.svcEvents[name], time.Time{}, now)
		if !m.doubted(s) && now.Before(s.expires) {
			s.owed = time.Time{} // current: nothing owed
		}
	}
}

// stop records Stop.
func (m *model) stop() {
	m.stopped = true
	for _, s := range m.svcs {
		s.owed = time.Time{}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// errCheck tells whether err is what the model wants.
func errCheck(got, want error) error {
	switch {
	case want == nil && got == nil:
		return nil
	case want == registry.ErrNotFound:
		if got != registry.ErrNotFound {
			return fmt.Errorf("error %v, want registry.ErrNotFound itself", got)
		}
	case want == ErrCancelled:
		if got != ErrCancelled {
			return fmt.Errorf("error %v, want ErrCancelled", got)
		}
	case want != nil:
		if !errors.Is(got, want) {
			return fmt.Errorf("error %v, want one matching %v", got, want)
		}
	default:
		return fmt.Errorf("error %v, want none", got)
	}
	return nil
}

// nodesOf is data as the model keeps it.
func nodesOf(svcs []*registry.Service) nodes {
	if svcs == nil {
		return nil
	}
	out := nodes{}
	for _, s := range svcs {
		for _, n := range s.Nodes {
			out[n.Id] = n.Address
		}
	}
	return out
}

func (n nodes) String() string {
	if n == nil {
		return "none"
	}
	var ids []string
	for id, addr := range n {
		ids = append(ids, id+"@"+addr)
	}
	sort.Strings(ids)
	return "{" + strings.Join(ids, " ") + "}"
}
