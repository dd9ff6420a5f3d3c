package storm

import (
	"fmt"
	"io"
	"strings"
	"time"

	gmcache "go-micro.dev/v4/registry/cache"
)

// describeClientPath says what the client path does.
func describeClientPath(r *Report, sc *Scenario) string {
	ttl := "Both caches are at their defaults, a TTL of 1m"
	if gmcache.DefaultTTL > sc.Length() {
		ttl += ": nothing expires in the scenario, so the selectors alone differ"
	}
	return fmt.Sprintf("%s has %d instances, go-micro RPC servers in the demo's process on loopback, registered through the registry. The lookup callers above have stopped; %d RPCs per second arrive at each client below, each on a goroutine of its own. %v in, the registry goes down as in the outage above, and instance %d is killed: its server stops without deregistering and its listener closes, so its node stays in every cache and connections to it are refused. %s. The table counts the RPCs and attempts that started from the kill on (%v in), to the end.",
		RPCService, rpcInstances, r.Config.RPCRate, r.Config.Unit(), rpcInstances, ttl, fmtDur(sc.Origin))
}

// rpcTable prints the client path's table, after how both clients are
// built.
func rpcTable(w io.Writer, r *Report, sc *Scenario) {
	fmt.Fprintln(w, "   "+wrap("both clients: go-micro's RPC client (go-micro.dev/v4/client), HTTP transport, a connection per attempt (client.PoolSize(0)), no client.Registry (the selector has it)", "   "))
	fmt.Fprintln(w, "   "+wrap("retry policy, both: "+RetryPolicy(), "   "))
	for _, c := range rpcClients(r) {
		if c.Wiring != "" {
			fmt.Fprintln(w, "   "+wrap(fmt.Sprintf("%s: %s", c.Name, c.Wiring), "   "))
		}
	}
	fmt.Fprintln(w)
	header := []string{"client", "RPCs", "failed", "attempts", "to dead node", fmt.Sprintf("after %d failures in a row", SettleAfter), "p50", "p99", "max"}
	cells := [][]string{header}
	for _, x := range sc.RPC {
		cells = append(cells, []string{x.Client, count(x.RPCs), share(x.Failed, x.RPCs), count(x.Attempts),
			share(x.DeadAttempts, x.Attempts), share(x.SettledDead, x.Settled), fmtDur(x.P50), fmtDur(x.P99), fmtDur(x.Max)})
	}
	columns(w, cells)
}

// rpcClients are the RPC clients of the run, as configured.
func rpcClients(r *Report) []RPCClient {
	if r.Config.RPCClients != nil {
		return r.Config.RPCClients
	}
	return DefaultRPCClients()
}

// RPCRowOf returns client's row in the client path.
func (r *Report) RPCRowOf(client string) (RPCRow, bool) {
	if len(r.Scenarios) <= ClientPath {
		return RPCRow{}, false
	}
	for _, x := range r.Scenarios[ClientPath].RPC {
		if x.Client == client {
			return x, true
		}
	}
	return RPCRow{}, false
}

// sumClientPath says, per RPC client, where its attempts went and what its
// RPCs saw; then why go-micro's selector did worse, where the numbers show
// it.
func sumClientPath(r *Report) []string {
	sc := &r.Scenarios[ClientPath]
	if len(sc.RPC) == 0 {
		return nil
	}
	var parts []string
	for _, x := range sc.RPC {
		parts = append(parts, rpcSentence(x))
	}
	s := fmt.Sprintf("Client path: with 1 of %d instances dead and the registry down, ", rpcInstances) + strings.Join(parts, " ")
	gm, ok1 := r.RPCRowOf(GoMicroSelector)
	rc, ok2 := r.RPCRowOf(RegCacheSelector)
	if ok1 && ok2 && gm.DeadShare() > 2*rc.DeadShare() && gm.DeadShare() >= 0.1 {
		s += fmt.Sprintf(" go-micro's default selector keeps no health (its Mark does nothing), so each attempt, retries included, picked the dead node with a chance of 1 in %d", rpcInstances)
		if gm.P99 >= 50*time.Millisecond {
			s += fmt.Sprintf(", and an RPC whose attempt did waited out go-micro's backoff before the next: p99 %s against %s", fmtDur(gm.P99), fmtDur(rc.P99))
		}
		if gm.Timeouts > 0 {
			s += fmt.Sprintf("; %s of its RPCs ran out of the %v request timeout while they waited", count(gm.Timeouts), rpcRequestTimeout)
		}
		s += "."
	}
	return []string{s}
}

// rpcSentence is what the numbers say about one RPC client.
func rpcSentence(x RPCRow) string {
	s := fmt.Sprintf("%s sent %s of %s attempts (%s) to the dead node", x.Client, count(x.DeadAttempts), count(x.Attempts), percent(x.DeadShare()))
	if x.HasEjections && x.Ejections > 0 {
		s += fmt.Sprintf(" and ejected it (%s)", plural(int64(x.Ejections), "ejection"))
	}
	if x.Settled > 0 {
		if x.SettledDead == 0 {
			s += fmt.Sprintf("; after %d failures in a row there, none of %s attempts", SettleAfter, count(x.Settled))
		} else {
			s += fmt.Sprintf("; after %d failures in a row there, %s of %s attempts (%s)", SettleAfter, count(x.SettledDead), count(x.Settled), percent(x.SettledShare()))
		}
		switch early := x.SettledDeadEarly; {
		case early == 0:
		case early == x.SettledDead:
			s += fmt.Sprintf(", %s that had started before (go-micro's client takes every attempt of an RPC from the one Next that its Select returned)",
				map[bool]string{true: "a retry of an RPC", false: "all retries of RPCs"}[early == 1])
		case 2*early >= x.SettledDead:
			s += fmt.Sprintf(", %s of them retries of RPCs that had started before (go-micro's client takes every attempt of an RPC from the one Next that its Select returned)", count(early))
		}
	}
	switch {
	case x.RPCs == 0:
		s += "; it made no RPC"
	case x.Failed == 0:
		s += fmt.Sprintf("; every one of its %s RPCs succeeded", count(x.RPCs))
	default:
		s += fmt.Sprintf("; %s of its %s RPCs failed (%s)", count(x.Failed), count(x.RPCs), percent(frac(x.Failed, x.RPCs)))
		var why []string
		for _, c := range []struct {
			n    int64
			what string
		}{{x.Timeouts, "on the request timeout"}, {x.Unreachable, "with every attempt refused"}} {
			switch {
			case c.n == 0:
			case x.Failed == 1:
				why = append(why, c.what)
			case c.n == x.Failed:
				why = append(why, "all "+c.what)
			default:
				why = append(why, count(c.n)+" "+c.what)
			}
		}
		if len(why) > 0 {
			s += ", " + strings.Join(why, " and ")
		}
		switch {
		case x.Untouched == 0:
		case x.Untouched == x.Failed:
			s += "; none of them had an attempt at the dead node: they ran out of time on live instances, on a machine too busy"
		default:
			s += fmt.Sprintf("; %s of them had no attempt at the dead node: they ran out of time on live instances, on a machine too busy", count(x.Untouched))
		}
	}
	return s + fmt.Sprintf(", p50 %s, p99 %s.", fmtDur(x.P50), fmtDur(x.P99))
}

// plural prints "1 ejection", "2 ejections".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return count(n) + " " + what + "s"
}
