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

// Move is one change of an entry's phase.
type Move struct {
	Name     string
	From, To Phase
}

// Cell is one way an input takes an entry from a phase to another, and
// when.
type Cell struct {
	From Phase
	In   Input
	To   Phase
	When string
}

// Table lists, for every phase but PhaseGone and every input that can
// reach an entry in it, the phases the input moves the entry to, each with
// when. A cell to the same phase is an input that leaves the phase as it
// is. Unreachable lists the other pairs, each with why.
var Table = []Cell{
	{PhaseAbsent, InLookup, PhaseFetching, "its window is closed: the gate admits a call, which the caller waits for"},
	{PhaseAbsent, InLookup, PhaseAbsent, "its window is open: registry.ErrNotFound (after a not-found) or the throttled error; or the registry is held down: the throttled error, and an entry with no window to keep is due at once"},
	{PhaseAbsent, InCreate, PhaseIdle, "the nodes are served at once, unconfirmed"},
	{PhaseAbsent, InDelete, PhaseAbsent, "ignored"},
	{PhaseAbsent, InDeleteLast, PhaseAbsent, "ignored"},
	{PhaseAbsent, InInvalid, PhaseAbsent, "ignored"},
	{PhaseAbsent, InFound, PhaseIdle, "a list's answer, stored"},
	{PhaseAbsent, InResync, PhaseQueued, "in line for a re-validation: the service may have registered unseen"},
	{PhaseAbsent, InDue, PhaseGone, "kept long enough: dropped"},
	{PhaseAbsent, InUnread, PhaseGone, "unread, its window closed: dropped"},
	{PhaseAbsent, InUnread, PhaseAbsent, "its window is open: kept"},
	{PhaseAbsent, InStop, PhaseAbsent, ""},

	{PhaseIdle, InLookup, PhaseFetching, "its data is too stale to serve (MaxStale): the caller waits for a call"},
	{PhaseIdle, InLookupDue, PhaseQueued, "its window allows a call: in line for a background refresh, the data served"},
	{PhaseIdle, InLookupDue, PhaseIdle, "its window is open: the data served, nothing asked"},
	{PhaseIdle, InCreate, PhaseIdle, "merged, the expiry kept"},
	{PhaseIdle, InDelete, PhaseIdle, "merged, the expiry kept"},
	{PhaseIdle, InDeleteLast, PhaseParked, "the last nodes served until a create, or the registry's confirmation after the grace"},
	{PhaseIdle, InInvalid, PhaseIdle, "stale at once"},
	{PhaseIdle, InFound, PhaseIdle, "a list's answer, stored"},
	{PhaseIdle, InResync, PhaseQueued, "in line for a re-validation"},
	{PhaseIdle, InUnread, PhaseGone, "unread, its window closed: dropped"},
	{PhaseIdle, InUnread, PhaseIdle, "read since the last scan, or its window open: kept"},
	{PhaseIdle, InStop, PhaseIdle, ""},

	{PhaseQueued, InLookup, PhaseFetching, "its data is too stale to serve (MaxStale): the caller waits for a call"},
	{PhaseQueued, InLookupDue, PhaseQueued, "the data served; the refresh is on its way"},
	{PhaseQueued, InCreate, PhaseQueued, "merged"},
	{PhaseQueued, InDelete, PhaseQueued, "merged"},
	{PhaseQueued, InDeleteLast, PhaseQueued, "the last nodes kept; the line parks it for the grace"},
	{PhaseQueued, InInvalid, PhaseQueued, "stale at once"},
	{PhaseQueued, InFound, PhaseQueued, "a list's answer, stored; the line finds it current"},
	{PhaseQueued, InResync, PhaseQueued, "in line already"},
	{PhaseQueued, InLine, PhaseFetching, "the gate admits a background call"},
	{PhaseQueued, InLine, PhaseParked, "its window is open, or a delete's grace runs: waits for it"},
	{PhaseQueued, InLine, PhaseIdle, "current after all: nothing to ask"},
	{PhaseQueued, InLine, PhaseAbsent, "no data and its window open: kept for it; or the last nodes a delete left, whose confirmation the window forbids: the delete is believed"},
	{PhaseQueued, InUnread, PhaseQueued, "in line: kept"},
	{PhaseQueued, InStop, PhaseQueued, "nothing starts any more"},

	{PhaseParked, InLookup, PhaseFetching, "its data is too stale to serve (MaxStale): the caller waits for a call"},
	{PhaseParked, InLookupDue, PhaseParked, "the data served; the refresh waits for its moment"},
	{PhaseParked, InCreate, PhaseParked, "merged; a create that ends a delete's grace is confirmed at the moment"},
	{PhaseParked, InDelete, PhaseParked, "merged"},
	{PhaseParked, InDeleteLast, PhaseParked, "the grace runs from this delete"},
	{PhaseParked, InInvalid, PhaseParked, "stale at once"},
	{PhaseParked, InFound, PhaseParked, "a list's answer, stored; or, for the last nodes a delete left, left to their own confirmation"},
	{PhaseParked, InResync, PhaseQueued, "the resync allows its early call: back in line"},
	{PhaseParked, InDue, PhaseQueued, "its moment has come: back in line"},
	{PhaseParked, InUnread, PhaseParked, "waiting: kept"},
	{PhaseParked, InStop, PhaseParked, "nothing starts any more"},

	{PhaseFetching, InLookup, PhaseFetching, "the caller joins the call"},
	{PhaseFetching, InLookupDue, PhaseFetching, "the data served; the call is out"},
	{PhaseFetching, InCreate, PhaseFetching, "merged, and kept to replay onto the answer"},
	{PhaseFetching, InDelete, PhaseFetching, "merged, and kept to replay onto the answer"},
	{PhaseFetching, InDeleteLast, PhaseFetching, "the last nodes kept, and the delete kept to replay onto the answer"},
	{PhaseFetching, InInvalid, PhaseFetching, "stale at once, and kept to replay"},
	{PhaseFetching, InFound, PhaseIdle, "stored, with the events that raced the call replayed"},
	{PhaseFetching, InFound, PhaseQueued, "stored, but the call started before the last resync: re-validated"},
	{PhaseFetching, InFound, PhaseParked, "a delete that raced the call left no node: the delete's grace, as on the stream"},
	{PhaseFetching, InNotFound, PhaseAbsent, "kept for its window, then dropped"},
	{PhaseFetching, InFailed, PhaseIdle, "the data served, stale"},
	{PhaseFetching, InFailed, PhaseQueued, "the data, in doubt since a resync, served stale and asked for again once the window allows"},
	{PhaseFetching, InFailed, PhaseParked, "the last nodes a delete left, their grace still running"},
	{PhaseFetching, InFailed, PhaseAbsent, "no data: kept for max(its window, a minute), then dropped"},
	{PhaseFetching, InCancelled, PhaseIdle, "no attempt recorded"},
	{PhaseFetching, InCancelled, PhaseAbsent, "no attempt recorded"},
	{PhaseFetching, InResync, PhaseFetching, "its answer is re-validated when it lands, if the call started before"},
	{PhaseFetching, InUnread, PhaseFetching, "a call is out: kept"},
	{PhaseFetching, InStop, PhaseFetching, "the call is cancelled: InCancelled follows"},
}

// Unreachable lists the pairs of a phase and an input that cannot meet,
// with why.
var Unreachable = []struct {
	From Phase
	In   Input
	Why  string
}{
	{PhaseAbsent, InLookupDue, "no data to be due"},
	{PhaseAbsent, InNotFound, "no call out, and a list settles only the services it lists with nodes"},
	{PhaseAbsent, InFailed, "no call out"},
	{PhaseAbsent, InCancelled, "no call out"},
	{PhaseAbsent, InLine, "not in line"},
	{PhaseIdle, InNotFound, "no call out, and a list settles only the services it lists with nodes"},
	{PhaseIdle, InFailed, "no call out"},
	{PhaseIdle, InCancelled, "no call out"},
	{PhaseIdle, InLine, "not in line"},
	{PhaseIdle, InDue, "waits for no moment"},
	{PhaseQueued, InNotFound, "no call out, and a list settles only the services it lists with nodes"},
	{PhaseQueued, InFailed, "no call out"},
	{PhaseQueued, InCancelled, "no call out"},
	{PhaseQueued, InDue, "waits for no moment"},
	{PhaseParked, InNotFound, "no call out, and a list settles only the services it lists with nodes"},
	{PhaseParked, InFailed, "no call out"},
	{PhaseParked, InCancelled, "no call out"},
	{PhaseParked, InLine, "not in line"},
	{PhaseFetching, InLine, "not in line"},
	{PhaseFetching, InDue, "waits for no moment"},
}

// allowed[from][to] is set when a cell of Table goes from from to to.
var allowed = func() (a [phases][phases]bool) {
	for _, c := range Table {
		a[c.From][c.To] = true
	}
	return a
}()
