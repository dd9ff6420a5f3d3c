package eject

// The states of a node in passive health and the table of their
// transitions. A node's state changes only in serviceHealth.move, which
// checks every change against the table; TestTableCells drives every cell
// through Health's methods, and TestTableNamesEveryPair checks that every
// (state, input) pair is a cell or is named impossible.

// nodeState is the state of one node of a service in passive health.
// Picks and successful Marks read it without the service's lock; it is
// written with the lock held, in move only.
type nodeState uint32

const (
	// stateHealthy: in rotation, nothing remembered. A node without
	// kept state is in it; a state is created in it and moves on at
	// once, under the same lock.
	stateHealthy nodeState = iota
	// stateFailing: in rotation, its failures in a row counted.
	stateFailing
	// stateEjected: skipped by every pick until its ejection ends. The
	// clock ends it: a pick reads a node past its end as on trial
	// (phase), and the next change under the lock moves it there.
	stateEjected
	// stateTrial: its ejection over, handed out to one caller at a time
	// until an attempt answers; its first failure ejects it again.
	stateTrial
	// stateRecovering: in rotation after a trial or failures answered,
	// its ejections in a row decaying; forgotten once they have.
	stateRecovering
	// stateLimbo: the registry lost it in a mass loss (limbo.go) and
	// no attempt has reached it since: handed out to one caller at a
	// time, until it is listed again, fails, or the limbo's bound ends.
	stateLimbo
	// stateLimboReached: in limbo, and an attempt reached it: handed
	// out to every caller, until it is listed again, fails, or the
	// limbo's bound ends.
	stateLimboReached
	// stateGone: forgotten. A later failure makes a new state.
	stateGone

	states
)

var stateNames = [states]string{"healthy", "failing", "ejected", "on trial", "recovering", "limbo", "limbo reached", "gone"}

func (s nodeState) String() string {
	if s < states {
		return stateNames[s]
	}
	return "state?"
}

// input is what can happen to a node's state.
type input uint8

const (
	// inFail: an attempt failed to reach the node.
	inFail input = iota
	// inReached: an attempt reached it (an answer, a handler's error
	// included).
	inReached
	// inEnd: the end of its ejection came.
	inEnd
	// inCap: its ejection is over the service's share of ejected
	// nodes (a list that shrank, a lower share set with Init).
	inCap
	// inIdle: the sweep finds it idle.
	inIdle
	// inPushedOut: more recent states off the list push it out.
	inPushedOut
	// inLost: the registry lost it in a mass loss: it left the list
	// with more than the limbo's share of its service's nodes, or with
	// the last of them, or while many services lost nodes.
	inLost
	// inListed: on the service's list again.
	inListed
	// inBound: the limbo's bound ended.
	inBound

	inputs
)

var inputNames = [inputs]string{"fail", "reached", "end", "cap", "idle", "pushed out", "lost", "listed", "bound"}

func (in input) String() string {
	if in < inputs {
		return inputNames[in]
	}
	return "input?"
}

// cell is one way an input takes a node from a state to another, and
// when. A cell to the same state leaves it as it is.
type cell struct {
	from nodeState
	in   input
	to   nodeState
	when string
}

// table lists, for every state but stateGone and every input that can
// reach a node in it, the states it may move to. impossible names the
// other pairs, each with why.
var table = []cell{
	{stateHealthy, inFail, stateFailing, "its first failure: fewer than the failures that eject"},
	{stateHealthy, inFail, stateEjected, "its first failure ejects (WithEjectAfter(1)), the share allowing"},

	{stateFailing, inFail, stateFailing, "one more failure, fewer than eject; or the share of ejected nodes is reached: kept in rotation, logged once"},
	{stateFailing, inFail, stateEjected, "the failures in a row that eject, the share allowing"},
	{stateFailing, inReached, stateRecovering, "answered: its failures cleared, its ejections in a row still decaying"},
	{stateFailing, inReached, stateGone, "answered, nothing left to remember: forgotten"},
	{stateFailing, inIdle, stateGone, "no failure for the maximum ejection time: forgotten"},
	{stateFailing, inPushedOut, stateGone, "off the list, pushed out by more recent states"},

	{stateEjected, inFail, stateEjected, "an attempt that began before the ejection: the node is out already"},
	{stateEjected, inReached, stateEjected, "an attempt that began before the ejection answered: the ejection holds"},
	{stateEjected, inEnd, stateTrial, "the ejection's end: one caller at a time may take it"},
	{stateEjected, inCap, stateTrial, "over the share of ejected nodes, nearest to its end: on trial at once"},
	{stateEjected, inPushedOut, stateGone, "off the list, pushed out by more recent states"},

	{stateTrial, inFail, stateEjected, "its trial failed: ejected again, for longer"},
	{stateTrial, inFail, stateTrial, "its trial failed but the share of ejected nodes is reached: stays on trial, logged once"},
	{stateTrial, inReached, stateRecovering, "its trial answered: readmitted, its ejections in a row decaying"},
	{stateTrial, inReached, stateGone, "its trial answered, its ejections in a row decayed already: forgotten"},
	{stateTrial, inIdle, stateGone, "its service not selected since the last sweep: forgotten"},
	{stateTrial, inPushedOut, stateGone, "off the list, pushed out by more recent states"},

	{stateRecovering, inFail, stateFailing, "a failure, fewer than eject: counted anew"},
	{stateRecovering, inFail, stateEjected, "the failures in a row that eject, the share allowing"},
	{stateRecovering, inReached, stateRecovering, "answered, its ejections in a row not decayed yet"},
	{stateRecovering, inReached, stateGone, "answered, its ejections in a row decayed: forgotten"},
	{stateRecovering, inIdle, stateGone, "no failure for the maximum ejection time: forgotten"},
	{stateRecovering, inPushedOut, stateGone, "off the list, pushed out by more recent states"},
	{stateRecovering, inLost, stateLimbo, "lost in a mass loss: kept, its ejections in a row forgotten"},

	{stateHealthy, inLost, stateLimbo, "lost in a mass loss: kept in rotation, one attempt at a time until one answers"},
	{stateFailing, inLost, stateFailing, "lost while failing: left, as any node off the list"},
	{stateEjected, inLost, stateEjected, "lost while ejected: left, as any node off the list"},
	{stateTrial, inLost, stateTrial, "lost on trial: left, as any node off the list"},

	{stateLimbo, inFail, stateGone, "its attempt could not reach it: dropped at once"},
	{stateLimbo, inReached, stateLimboReached, "its attempt answered: every caller may take it"},
	{stateLimbo, inListed, stateGone, "registered again: back on the list, nothing remembered"},
	{stateLimbo, inBound, stateGone, "the limbo's bound ended, or limbo was turned off: dropped"},

	{stateLimboReached, inFail, stateGone, "an attempt could not reach it: dropped at once"},
	{stateLimboReached, inReached, stateLimboReached, "answered again"},
	{stateLimboReached, inListed, stateGone, "registered again: back on the list, nothing remembered"},
	{stateLimboReached, inBound, stateGone, "the limbo's bound ended, or limbo was turned off: dropped"},
}

// impossible names the (state, input) pairs that are no cell, and why.
var impossible = []struct {
	from nodeState
	in   input
	why  string
}{
	{stateHealthy, inReached, "no state is kept for a healthy node: a success finds none"},
	{stateHealthy, inEnd, "not ejected"},
	{stateHealthy, inCap, "not ejected"},
	{stateHealthy, inIdle, "no state is kept for a healthy node"},
	{stateHealthy, inPushedOut, "no state is kept for a healthy node"},
	{stateFailing, inEnd, "not ejected"},
	{stateFailing, inCap, "not ejected"},
	{stateEjected, inIdle, "ejected is not idle: its ejection ends first"},
	{stateTrial, inEnd, "its ejection is over already"},
	{stateTrial, inCap, "its ejection is over already"},
	{stateRecovering, inEnd, "not ejected"},
	{stateRecovering, inCap, "not ejected"},
	{stateHealthy, inListed, "only a node in limbo is told it is listed again"},
	{stateFailing, inListed, "only a node in limbo is told it is listed again"},
	{stateEjected, inListed, "only a node in limbo is told it is listed again"},
	{stateTrial, inListed, "only a node in limbo is told it is listed again"},
	{stateRecovering, inListed, "only a node in limbo is told it is listed again"},
	{stateHealthy, inBound, "not in limbo"},
	{stateFailing, inBound, "not in limbo"},
	{stateEjected, inBound, "not in limbo"},
	{stateTrial, inBound, "not in limbo"},
	{stateRecovering, inBound, "not in limbo"},
	{stateLimbo, inEnd, "not ejected"},
	{stateLimbo, inCap, "not ejected"},
	{stateLimbo, inIdle, "the sweep leaves limbo to its bound"},
	{stateLimbo, inPushedOut, "limbo is not among the states off the list that push each other out"},
	{stateLimbo, inLost, "off the list already"},
	{stateLimboReached, inEnd, "not ejected"},
	{stateLimboReached, inCap, "not ejected"},
	{stateLimboReached, inIdle, "the sweep leaves limbo to its bound"},
	{stateLimboReached, inPushedOut, "limbo is not among the states off the list that push each other out"},
	{stateLimboReached, inLost, "off the list already"},
}

// moves is the table as a set: moves[from][in] has bit 1<<to set for each
// cell.
var moves = func() (m [states][inputs]uint32) {
	for _, c := range table {
		m[c.from][c.in] |= 1 << c.to
	}
	return m
}()

// allowed reports whether the table has the cell (from, in, to).
func allowed(from nodeState, in input, to nodeState) bool {
	return from < states && in < inputs && moves[from][in]&(1<<to) != 0
}

// state returns nh's state as stored.
func (nh *nodeHealth) state() nodeState { return nodeState(nh.st.Load()) }

// phase returns nh's state at now (Health.nanos): an ejected node whose
// ejection is over is on trial, whether or not a change under the lock
// has moved it there yet.
func (nh *nodeHealth) phase(now int64) nodeState {
	s := nh.state()
	if s == stateEjected && !nh.ejectedAt(now) {
		return stateTrial
	}
	return s
}

// move changes nh's state to to, for in; a move to the state it is in
// changes nothing. A change the table does not allow is made all the same
// (the code's intent wins over a stale table) but counted in
// Health.violations, which every test checks. h.mu is held.
func (h *serviceHealth) move(nh *nodeHealth, in input, to nodeState) {
	from := nh.state()
	if from == to {
		return
	}
	if !allowed(from, in, to) {
		h.p.violations.Add(1)
	}
	nh.st.Store(uint32(to))
	if f := h.p.onMove; f != nil {
		f(h.name, nh.key, from, in, to)
	}
}

// settleLocked moves nh to on trial if its ejection is over at now
// (Health.nanos). h.mu is held.
func (h *serviceHealth) settleLocked(nh *nodeHealth, now int64) {
	if nh.state() == stateEjected && !nh.ejectedAt(now) {
		h.move(nh, inEnd, stateTrial)
	}
}
