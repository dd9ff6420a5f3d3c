package cache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/selector"
)

// optionCase is what an option accepts and refuses: values that Validate
// must accept and values it must refuse, naming the option.
type optionCase struct {
	name     string
	accepted []Option
	refused  []Option
	// deflt is the option's default as the README writes it, and the
	// value of Options it is compared with; empty when it has none to
	// compare.
	deflt string
	value func(Options) string
}

// dur writes d as the README does: 0 for none.
func dur(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return fmt.Sprint(d)
}

// optionCases lists every Option constructor of the package. The README's
// table of options must list the same ones, with the same defaults.
var optionCases = []optionCase{
	{name: "WithTTL", deflt: "1 min", value: func(o Options) string { return dur(o.TTL) },
		accepted: []Option{WithTTL(1), WithTTL(time.Hour), WithTTL(math.MaxInt64)},
		refused:  []Option{WithTTL(0), WithTTL(-time.Second), WithTTL(math.MinInt64)}},
	{name: "WithMinimumRetryInterval", deflt: "5 s", value: func(o Options) string { return dur(o.MinimumRetryInterval) },
		accepted: []Option{WithMinimumRetryInterval(0), WithMinimumRetryInterval(time.Minute)},
		refused:  []Option{WithMinimumRetryInterval(-1)}},
	{name: "WithMaximumRetryInterval", deflt: "= minimum",
		accepted: []Option{WithMaximumRetryInterval(0), WithMaximumRetryInterval(5 * time.Second), WithMaximumRetryInterval(time.Hour)},
		refused:  []Option{WithMaximumRetryInterval(-1), WithMaximumRetryInterval(time.Second)}},
	{name: "WithProbeInterval", deflt: "1 s", value: func(o Options) string { return dur(o.ProbeInterval) },
		accepted: []Option{WithProbeInterval(0), WithProbeInterval(time.Millisecond)},
		refused:  []Option{WithProbeInterval(-time.Second)}},
	{name: "WithRefreshAhead", deflt: "0", value: func(o Options) string { return fmt.Sprint(o.RefreshAhead) },
		accepted: []Option{WithRefreshAhead(0), WithRefreshAhead(0.1), WithRefreshAhead(0.99)},
		refused: []Option{WithRefreshAhead(-0.1), WithRefreshAhead(1), WithRefreshAhead(math.NaN()),
			WithRefreshAhead(math.Inf(1)), WithRefreshAhead(0.01)}}, // 0.6 s of the minute: below the 5 s interval
	{name: "WithTTLJitter", deflt: "0", value: func(o Options) string { return fmt.Sprint(o.TTLJitter) },
		accepted: []Option{WithTTLJitter(0), WithTTLJitter(0.5)},
		refused:  []Option{WithTTLJitter(-0.5), WithTTLJitter(1), WithTTLJitter(math.NaN())}},
	{name: "WithMaximumStale", deflt: "0", value: func(o Options) string { return dur(o.MaximumStale) },
		accepted: []Option{WithMaximumStale(0), WithMaximumStale(time.Hour)},
		refused:  []Option{WithMaximumStale(-time.Nanosecond)}},
	{name: "WithLastKnownNodes", deflt: "off",
		accepted: []Option{WithLastKnownNodes()}},
	{name: "WithIdleEviction", deflt: "0", value: func(o Options) string { return dur(o.IdleEviction) },
		accepted: []Option{WithIdleEviction(0), WithIdleEviction(time.Second), WithIdleEviction(time.Hour)},
		refused:  []Option{WithIdleEviction(-time.Second), WithIdleEviction(500 * time.Millisecond), WithIdleEviction(1)}},
	{name: "WithObserver", deflt: "none",
		accepted: []Option{WithObserver(func(Event) {})},
		refused:  []Option{WithObserver(nil)}},
	{name: "WithSnapshot", deflt: "none",
		accepted: []Option{WithSnapshot(filepath.Join(os.TempDir(), "regcache-options-test.snapshot"))},
		refused:  []Option{WithSnapshot("")}},
	{name: "WithWatchPerService", deflt: "off: one stream",
		accepted: []Option{WithWatchPerService()}},
	{name: "WithSelectorOptions", deflt: "none",
		accepted: []Option{WithSelectorOptions(), WithSelectorOptions(WithEjectAfter(0), WithEjectionTime(time.Second, time.Second),
			WithMaximumEjectedPercent(0), WithMaximumEjectedPercent(100), WithLimbo(0, 0), WithLimbo(1, time.Hour),
			selector.SetStrategy(selector.RoundRobin))},
		refused: []Option{WithSelectorOptions(WithEjectAfter(-1)), WithSelectorOptions(WithEjectionTime(0, time.Second)),
			WithSelectorOptions(WithEjectionTime(time.Minute, time.Second)), WithSelectorOptions(WithMaximumEjectedPercent(-1)),
			WithSelectorOptions(WithMaximumEjectedPercent(101)), WithSelectorOptions(selector.SetStrategy(nil)),
			WithSelectorOptions(WithLimbo(-0.5, 0)), WithSelectorOptions(WithLimbo(1.5, 0)),
			WithSelectorOptions(WithLimbo(0.5, -time.Second)),
			WithSelectorOptions(nil)}},
	{name: "WithLogger", deflt: "go-micro's",
		accepted: []Option{WithLogger(&testLogger{})},
		refused:  []Option{WithLogger(nil)}},
}

// Validate accepts what the README says each option accepts, refuses the
// rest with an error that names the option, and New panics with exactly
// that error's message on what Validate refuses.
func TestValidateIsTheOptionsTable(t *testing.T) {
	f := newFakeRegistry()
	for _, tc := range optionCases {
		t.Run(tc.name, func(t *testing.T) {
			for i, opt := range tc.accepted {
				require.NoError(t, Validate(opt), "accepted value %d", i)
				New(f, WithLogger(&testLogger{}), opt).Stop()
			}
			for i, opt := range tc.refused {
				err := Validate(opt)
				require.Error(t, err, "refused value %d", i)
				assert.True(t, strings.HasPrefix(err.Error(), "regcache: "+tc.name+": "), "refused value %d: %v", i, err)
				assert.PanicsWithValue(t, err.Error(), func() { New(f, WithLogger(&testLogger{}), opt) }, "refused value %d", i)
			}
		})
	}
	assert.EqualError(t, Validate(nil), "regcache: New: nil Option")
	assert.NoError(t, Validate())
}

// Whatever the options, New panics exactly when Validate refuses them, with
// Validate's message.
func TestNewPanicsExactlyWhenValidateRefuses(t *testing.T) {
	var pool []Option
	for _, tc := range optionCases {
		pool = append(append(pool, tc.accepted...), tc.refused...)
	}
	pool = append(pool, WithTTL(time.Second), WithTTL(10*time.Second), WithRefreshAhead(0.5),
		WithMinimumRetryInterval(100*time.Millisecond), WithTTLJitter(0.99))
	f := newFakeRegistry()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		opts := make([]Option, 1+r.IntN(5))
		opts[0] = WithLogger(&testLogger{})
		for j := 1; j < len(opts); j++ {
			opts[j] = pool[r.IntN(len(pool))]
		}
		err := Validate(opts...)
		got := func() (p any) {
			defer func() { p = recover() }()
			New(f, opts...).Stop()
			return nil
		}()
		if err == nil {
			require.Nil(t, got, "New panicked on options Validate accepted")
		} else {
			require.Equal(t, err.Error(), got)
		}
	}
}
