package storm

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go-micro.dev/v4/registry"
)

// The checks below are what the demo's tests assert about a client, on any
// backend. Each returns nil if the client's row shows the behaviour, and an
// error saying what the row shows otherwise.

// CheckRolling checks that key's client failed no lookup in the rolling
// deployment, and returned no node more than slack after it had left the
// registry: the watch stream's delete events reached it.
func CheckRolling(r *Report, key Key, slack time.Duration) error {
	x, err := lookedUp(r, RollingDeploy, key)
	if err != nil {
		return err
	}
	if x.Failed > 0 || x.OldLag > slack {
		return fmt.Errorf("rolling deployment: %v failed %d lookups, and returned an old node in %d, up to %v after it had left (want none failed, none over %v)",
			key, x.Failed, x.Old, x.OldLag, slack)
	}
	return nil
}

// CheckRestart checks that key's client neither failed nor returned the old
// node once the new instance's event had reached the demo's own watch
// stream, allowing slack for the client's stream to deliver it too.
func CheckRestart(r *Report, key Key, slack time.Duration) error {
	sc := &r.Scenarios[Restart]
	if sc.EventSeen == 0 {
		return fmt.Errorf("restart: no watch stream saw the new instance registered %v into the scenario", sc.Registered)
	}
	x, err := lookedUp(r, Restart, key)
	if err != nil {
		return err
	}
	if late := x.LastBad - sc.EventSeen; late > slack {
		return fmt.Errorf("restart: %v failed or returned the old node until %v after the new instance's event arrived (%d failed, %d old; want none after %v)",
			key, late, x.Failed, x.Old, slack)
	}
	return nil
}

// CheckRecovery checks that every service was current for key's client
// within limit of the registry's return: no lookup failed or returned an
// old node later. If fromFirstOK is set, limit counts from the client's
// first registry call that succeeded in the recovery instead, when that
// came later: over etcd, each client reconnects on its own backoff.
func CheckRecovery(r *Report, key Key, limit time.Duration, fromFirstOK bool) error {
	sc := &r.Scenarios[Recovery]
	x, err := lookedUp(r, Recovery, key)
	if err != nil {
		return err
	}
	from, what := sc.Origin, "the registry's return"
	if fromFirstOK {
		if x.FirstOK == 0 {
			return fmt.Errorf("recovery: no registry call of %v succeeded", key)
		}
		if x.FirstOK > from {
			from, what = x.FirstOK, "its first registry call that succeeded"
		}
	}
	if x.Stuck || x.LastBad-from > limit {
		return fmt.Errorf("recovery: %v failed or returned old nodes until %v after %s (%d failed, %d old; stuck to the end: %v), want every service current within %v",
			key, x.LastBad-from, what, x.Failed, x.Old, x.Stuck, limit)
	}
	return nil
}

func lookedUp(r *Report, p int, key Key) (Row, error) {
	x, ok := r.Row(p, key)
	if !ok || x.Lookups == 0 {
		return x, fmt.Errorf("%s: %v made no lookup", r.Scenarios[p].Title, key)
	}
	return x, nil
}

// Frozen is c, except that each instance answers every service, after its
// first answer with nodes, with that answer forever: a cache that never
// updates what it serves. Every lookup still goes through c, so c makes
// its registry calls as usual. The tests run it next to the real clients,
// to show that their checks fail on it.
func Frozen(c Client) Client {
	return Client{
		Name: "frozen " + c.Name,
		New: func(reg registry.Registry, cfg Config) (registry.Registry, func()) {
			lookup, stop := c.New(reg, cfg)
			return &frozen{Registry: lookup}, stop
		},
	}
}

type frozen struct {
	registry.Registry
	first sync.Map // service name → []*registry.Service
}

func (f *frozen) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	svcs, err := f.Registry.GetService(name, opts...)
	if first, ok := f.first.Load(name); ok {
		return first.([]*registry.Service), nil
	}
	if err == nil && len(svcs) > 0 {
		f.first.Store(name, svcs)
	}
	return svcs, err
}

// The targets of the client path that CheckClientPath reports missed; its
// error matches each one missed under errors.Is.
var (
	ErrRPCsFailed    = errors.New("RPCs failed")
	ErrDeadNodeShare = errors.New("attempts went to the dead node after its first failures")
)

// CheckClientPath checks the targets of the client path for the RPC client
// name: every RPC succeeded (else ErrRPCsFailed), and at most maxShare of
// its attempts went to the dead node once it had told its selector of the
// node's SettleAfter failures in a row (else ErrDeadNodeShare). The dead node
// must have had attempts, and more than SettleAfter of them must have
// followed its first failures, or it must have had no more than
// SettleAfter in all: otherwise nothing was tested.
func CheckClientPath(r *Report, name string, maxShare float64) error {
	x, ok := r.RPCRowOf(name)
	switch {
	case !ok || x.RPCs == 0:
		return fmt.Errorf("client path: %s made no RPC", name)
	case x.DeadAttempts == 0:
		return fmt.Errorf("client path: %s sent no attempt to the dead node: it was not in the client's data", name)
	case x.Settled == 0 && x.DeadAttempts > SettleAfter:
		return fmt.Errorf("client path: %s made no attempt after %d failures in a row of the dead node", name, SettleAfter)
	}
	// A selector that left the dead node before it failed SettleAfter
	// times in a row (a refused connection ejects at once) sent it at most
	// that many attempts in all: no share is left to measure.
	e := &ClientPathError{Client: name}
	if x.Failed > 0 {
		e.Missed = append(e.Missed, fmt.Errorf("%w: %d of %d (%d on the request timeout, %d with every attempt refused; %d without an attempt at the dead node)",
			ErrRPCsFailed, x.Failed, x.RPCs, x.Timeouts, x.Unreachable, x.Untouched))
	}
	if x.SettledShare() > maxShare {
		e.Missed = append(e.Missed, fmt.Errorf("%w: %d of %d (%s; want at most %s), %d of them retries of RPCs that had started before",
			ErrDeadNodeShare, x.SettledDead, x.Settled, percent(x.SettledShare()), percent(maxShare), x.SettledDeadEarly))
	}
	if len(e.Missed) == 0 {
		return nil
	}
	return e
}

// ClientPathError lists the targets of the client path that a client
// missed.
type ClientPathError struct {
	Client string
	Missed []error
}

func (e *ClientPathError) Error() string {
	var parts []string
	for _, m := range e.Missed {
		parts = append(parts, m.Error())
	}
	return fmt.Sprintf("client path: %s: %s", e.Client, strings.Join(parts, "; "))
}

func (e *ClientPathError) Unwrap() []error { return e.Missed }
