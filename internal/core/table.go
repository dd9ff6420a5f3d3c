package core

// The transition table of an entry: for each phase and each input, the
// phases it may be in after. move checks every change of phase against
// it; TestTableCells drives every cell through the core's inputs;
// docs/core.md shows it (TestTableDoc keeps the two the same).

// Input is what can happen to an entry.
type Input uint8

const (
	// InLookup: a lookup with no data it may serve.
	InLookup Input = iota
	// InLookupDue: a lookup of data due a refresh (expired, ahead of
	// expiry, or too stale to serve under MaxStale).
	InLookupDue
	// InCreate: a create or update event that announces nodes.
	InCreate
	// InDelete: a delete event that leaves nodes.
	InDelete
	// InDeleteLast: a delete event that leaves no node.
	InDeleteLast
	// InInvalid: an event that cannot be applied.
	InInvalid
	// InFound: an answer with nodes: the entry's call's, or a list's.
	InFound
	// InNotFound: an answer, believed, that the service has no node.
	InNotFound
	// InFailed: the entry's call failed, or its empty answer is doubted.
	InFailed
	// InCancelled: the entry's call's context ended (Stop).
	InCancelled
	// InResync: a resync round reaches the entry, whose data predates it.
	InResync
	// InLine: the line of background refreshes reaches the entry.
	InLine
	// InDue: the moment the entry waits for comes: the end of its window
	// or of a delete's grace (parked), or of its keeping (absent).
	InDue
	// InUnread: the idle eviction scan finds the entry unread.
	InUnread
	// InStop: Stop.
	InStop

	inputs
)

var inputNames = [inputs]string{"lookup", "lookup due", "create", "delete", "delete last", "invalid event",
	"found", "not found", "failed", "cancelled", "resync", "line", "due", "unread", "stop"}

func (in Input) String() string {
	if in < inputs {
		return inputNames[in]
	}
	return "input?"
}

// Cell is one way an input takes an entry from a phase to another, and
// when.
type Cell struct {
	From Phase
	In   Input
	To   Phase
	When string
}

// Table lists, for every phase but PhaseGone and every input, where the
// entry goes. An input that does not change the phase has a cell to the
// same phase; one that cannot reach an entry in a phase has none (an
// entry without data is never queued, so no event finds a queued entry
// without data, for example).
var Table = []Cell{
	{PhaseAbsent, InLookup, PhaseFetching, "the gate admits a call; the caller waits for it"},
	{PhaseAbsent, InLookup, PhaseAbsent, "refused: the retry window is open, or the registry is held down (the entry is dropped if it has no window to keep)"},
	{PhaseAbsent, InLookup, PhaseGone, "refused while the registry is held down, with no window to keep"},
	{PhaseAbsent, InCreate, PhaseIdle, "the nodes are served at once, unconfirmed"},
	{PhaseAbsent, InFound, PhaseIdle, "a list's answer, stored"},
	{PhaseAbsent, InDelete, PhaseAbsent, "ignored"},
	{PhaseAbsent, InDeleteLast, PhaseAbsent, "ignored"},
	{PhaseAbsent, InInvalid, PhaseAbsent, "ignored"},
	{PhaseAbsent, InResync, PhaseQueued, "in line for a re-validation: it may have been registered unseen"},
	{PhaseAbsent, InDue, PhaseGone, "its window has closed: dropped"},
	{PhaseAbsent, InUnread, PhaseGone, "its window has closed: dropped"},
	{PhaseAbsent, InUnread, PhaseAbsent, "its window is open: kept"},
	{PhaseAbsent, InStop, PhaseAbsent, ""},

	{PhaseIdle, InLookup, PhaseFetching, "data too stale to serve under MaxStale: the caller waits for a call"},
	{PhaseIdle, InLookupDue, PhaseQueued, "its window allows a call: in line for a background refresh, the data served"},
	{PhaseIdle, InLookupDue, PhaseFetching, "in line and at once through it, a slot being free"},
	{PhaseIdle, InLookupDue, PhaseIdle, "its window is open: the data served, nothing asked"},
	{PhaseIdle, InCreate, PhaseIdle, "merged, the expiry kept"},
	{PhaseIdle, InDelete, PhaseIdle, "merged, the expiry kept"},
	{PhaseIdle, InDeleteLast, PhaseParked, "the last nodes served until a create, or the registry's confirmation after the grace"},
	{PhaseIdle, InInvalid, PhaseIdle, "stale at once"},
	{PhaseIdle, InFound, PhaseIdle, "a list's answer, stored"},
	{PhaseIdle, InNotFound, PhaseAbsent, "a list's answer: dropped at the window's end"},
	{PhaseIdle, InResync, PhaseQueued, "in line for a re-validation"},
	{PhaseIdle, InUnread, PhaseGone, "unread for IdleEviction, its window closed"},
	{PhaseIdle, InUnread, PhaseIdle, "read since, or its window open"},
	{PhaseIdle, InStop, PhaseIdle, ""},

	{PhaseQueued, InLookup, PhaseFetching, "data too stale to serve under MaxStale: the caller waits for a call"},
	{PhaseQueued, InLookupDue, PhaseQueued, "the data served; the refresh is on its way"},
	{PhaseQueued, InCreate, PhaseQueued, "merged"},
	{PhaseQueued, InDelete, PhaseQueued, "merged"},
	{PhaseQueued, InDeleteLast, PhaseQueued, "the last nodes kept; the line parks it for the grace"},
	{PhaseQueued, InInvalid, PhaseQueued, "stale at once"},
	{PhaseQueued, InFound, PhaseQueued, "a list's answer, stored; the line finds it current"},
	{PhaseQueued, InNotFound, PhaseAbsent, "a list's answer: dropped at the window's end"},
	{PhaseQueued, InLine, PhaseFetching, "the gate admits a background call"},
	{PhaseQueued, InLine, PhaseParked, "its window is open, or a delete's grace runs: waits for it"},
	{PhaseQueued, InLine, PhaseIdle, "current after all: nothing to ask"},
	{PhaseQueued, InLine, PhaseAbsent, "the last nodes a delete left, whose confirmation its window forbids: the delete is believed; or no data and no call: kept for its window"},
	{PhaseQueued, InStop, PhaseQueued, "nothing starts any more"},

	{PhaseParked, InLookup, PhaseFetching, "data too stale to serve under MaxStale: the caller waits for a call"},
	{PhaseParked, InLookupDue, PhaseParked, "the data served; the refresh waits for its moment"},
	{PhaseParked, InCreate, PhaseParked, "merged; a create that ends a delete's grace is confirmed at the moment"},
	{PhaseParked, InDelete, PhaseParked, "merged"},
	{PhaseParked, InDeleteLast, PhaseParked, "the grace runs from this delete"},
	{PhaseParked, InInvalid, PhaseParked, "stale at once"},
	{PhaseParked, InFound, PhaseParked, "a list's answer, stored"},
	{PhaseParked, InNotFound, PhaseAbsent, "a list's answer: dropped at the window's end"},
	{PhaseParked, InResync, PhaseQueued, "the resync allows its early call: back in line"},
	{PhaseParked, InDue, PhaseQueued, "back in line"},
	{PhaseParked, InStop, PhaseParked, "nothing starts any more"},

	{PhaseFetching, InLookup, PhaseFetching, "the caller joins the call"},
	{PhaseFetching, InLookupDue, PhaseFetching, "the data served; the call is out"},
	{PhaseFetching, InCreate, PhaseFetching, "merged, and kept to replay onto the answer"},
	{PhaseFetching, InDelete, PhaseFetching, "merged, and kept to replay onto the answer"},
	{PhaseFetching, InDeleteLast, PhaseFetching, "the last nodes kept, and the delete kept to replay onto the answer"},
	{PhaseFetching, InInvalid, PhaseFetching, "stale at once, and kept to replay"},
	{PhaseFetching, InFound, PhaseIdle, "stored, with the events that raced the call replayed"},
	{PhaseFetching, InFound, PhaseQueued, "stored, but fetched before the last resync: re-validated"},
	{PhaseFetching, InFound, PhaseParked, "a delete that raced the call left no node: the delete's grace, as on the stream"},
	{PhaseFetching, InNotFound, PhaseAbsent, "kept for its window, then dropped"},
	{PhaseFetching, InFailed, PhaseIdle, "the data served, stale"},
	{PhaseFetching, InFailed, PhaseAbsent, "no data: kept for max(window, a minute), then dropped"},
	{PhaseFetching, InCancelled, PhaseIdle, "no attempt recorded"},
	{PhaseFetching, InCancelled, PhaseAbsent, "no attempt recorded"},
	{PhaseFetching, InStop, PhaseFetching, "the call is cancelled: InCancelled follows"},
}

// allowed[from][to] is set when a cell of Table goes from from to to.
var allowed = func() (a [phases][phases]bool) {
	for _, c := range Table {
		a[c.From][c.To] = true
	}
	return a
}()
