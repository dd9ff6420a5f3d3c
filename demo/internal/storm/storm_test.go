package storm

import (
	"errors"
	"math/rand"
	"sort"
	"testing"
	"time"
)

func TestHistQuantiles(t *testing.T) {
	var (
		h   hist
		all []time.Duration
	)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		// From nanoseconds to seconds.
		d := time.Duration(r.ExpFloat64() * float64(time.Duration(1)<<uint(r.Intn(31))))
		h.add(d)
		all = append(all, d)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)-1))]
		got := h.quantile(q)
		if diff := float64(got - exact); diff > 0.016*float64(exact)+1 || -diff > 0.016*float64(exact)+1 {
			t.Errorf("q%v: got %v, exact %v", q, got, exact)
		}
	}
	if got, want := h.quantile(1), all[len(all)-1]; got != want {
		t.Errorf("max: got %v, want %v", got, want)
	}
	var empty hist
	if empty.quantile(0.5) != 0 || empty.quantile(1) != 0 {
		t.Errorf("empty histogram has quantiles")
	}
}

func TestBuckets(t *testing.T) {
	prev := -1
	for d := time.Duration(0); d < time.Hour; d = d*9/8 + 1 {
		b := bucketOf(d)
		if b < prev || b >= numBuckets {
			t.Fatalf("bucketOf(%v) = %d after %d", d, b, prev)
		}
		prev = b
		if v := valueOf(b); float64(v-d) > 0.016*float64(d)+1 || float64(d-v) > 0.016*float64(d)+1 {
			t.Fatalf("valueOf(bucketOf(%v)) = %v", d, v)
		}
	}
	if b := bucketOf(1 << 62); b != numBuckets-1 {
		t.Errorf("bucketOf(huge) = %d, want the last bucket", b)
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "0",
		211:                      "211ns",
		2345:                     "2.35µs",
		61800 * time.Microsecond: "61.8ms",
		time.Second:              "1.00s",
		163 * time.Millisecond:   "163ms",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", int64(d), got, want)
		}
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
	for _, tc := range []struct {
		n, total int64
		want     string
	}{
		{0, 10, "0"}, {10, 10, "10 (100%)"}, {997, 1000, "997 (99%)"}, {56, 100, "56 (56%)"},
		{56, 1000, "56 (5.6%)"}, {56, 10000, "56 (0.56%)"}, {1234, 1234, "1,234 (100%)"},
	} {
		if got := share(tc.n, tc.total); got != tc.want {
			t.Errorf("share(%d, %d) = %q, want %q", tc.n, tc.total, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int64
		d    time.Duration
		want string
	}{
		{40, 10 * time.Second, "4.0"}, {18518, 10 * time.Second, "1,852"}, {999, 10 * time.Second, "99.9"}, {5, 0, "-"},
	} {
		if got := rate(tc.n, tc.d); got != tc.want {
			t.Errorf("rate(%d, %v) = %q, want %q", tc.n, tc.d, got, tc.want)
		}
	}
}

// CheckClientPath passes a client that met both targets, names each target
// missed, and refuses a row that tested nothing.
func TestCheckClientPath(t *testing.T) {
	good := RPCRow{Client: "c", RPCs: 1000, Attempts: 1003, DeadAttempts: 3, Settled: 1000}
	for _, tc := range []struct {
		name string
		row  func(*RPCRow)
		want []error // nil: passes; empty: fails without a target
	}{
		{"both met", func(*RPCRow) {}, nil},
		{"2% after the first failures", func(x *RPCRow) { x.SettledDead, x.DeadAttempts = 20, 23 }, nil},
		{"one RPC failed", func(x *RPCRow) { x.Failed, x.Timeouts = 1, 1 }, []error{ErrRPCsFailed}},
		{"over 2%", func(x *RPCRow) { x.SettledDead, x.DeadAttempts = 21, 24 }, []error{ErrDeadNodeShare}},
		{"both missed", func(x *RPCRow) { x.Failed, x.SettledDead, x.DeadAttempts = 5, 300, 303 }, []error{ErrRPCsFailed, ErrDeadNodeShare}},
		{"no RPC", func(x *RPCRow) { x.RPCs = 0 }, []error{}},
		{"dead node never picked", func(x *RPCRow) { x.DeadAttempts = 0 }, []error{}},
		{"no attempt after the first failures", func(x *RPCRow) { x.Settled, x.DeadAttempts = 0, SettleAfter+1 }, []error{}},
		{"left before its failures in a row", func(x *RPCRow) { x.Settled, x.DeadAttempts = 0, 1 }, nil},
	} {
		row := good
		tc.row(&row)
		rep := &Report{Scenarios: make([]Scenario, len(script))}
		rep.Scenarios[ClientPath].RPC = []RPCRow{row}
		err := CheckClientPath(rep, "c", 0.02)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v, want nil", tc.name, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: nil, want an error", tc.name)
		}
		for _, target := range []error{ErrRPCsFailed, ErrDeadNodeShare} {
			want := false
			for _, w := range tc.want {
				want = want || w == target
			}
			if got := errors.Is(err, target); got != want {
				t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tc.name, err, target, got, want)
			}
		}
	}
	if err := CheckClientPath(&Report{Scenarios: make([]Scenario, len(script))}, "c", 0.02); err == nil {
		t.Errorf("a client without a row passes")
	}
}

// The steady state starts once SettleAfter failures in a row of the dead
// node have been reported to Mark: a success in between breaks the row,
// and once reached it lasts.
func TestSettleAfterFailuresInARow(t *testing.T) {
	var tl tally
	fail := errors.New("connection error")
	steps := []struct {
		err     error
		settled bool
	}{
		{fail, false}, {nil, false}, {fail, false}, {fail, false}, {nil, false},
		{fail, false}, {fail, false}, {fail, true}, {nil, true}, {fail, true},
	}
	for i, s := range steps {
		tl.marked(s.err)
		if got := tl.settledNow.Load(); got != s.settled {
			t.Fatalf("after outcome %d (%v): settled %v, want %v", i+1, s.err, got, s.settled)
		}
	}
	if SettleAfter != 3 {
		t.Fatalf("the steps above assume SettleAfter = 3")
	}
}
