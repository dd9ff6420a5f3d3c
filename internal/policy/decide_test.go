package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	fresh := Data{Held: true, RefreshAt: t0.Add(time.Minute), Expires: t0.Add(time.Minute)}
	stale := Data{Held: true, RefreshAt: t0.Add(-time.Second), Expires: t0.Add(-time.Second)}
	ahead := Data{Held: true, RefreshAt: t0.Add(-time.Second), Expires: t0.Add(time.Minute)}
	none := Data{}
	never := Throttle{}
	recent := Throttle{LastAttempt: t0.Add(-time.Second)}
	old := Throttle{LastAttempt: t0.Add(-interval)}

	tests := []struct {
		name     string
		data     Data
		inFlight bool
		th       Throttle
		interval time.Duration
		want     Decision
	}{
		{"rule 2: fresh is served", fresh, false, recent, interval, ServeFresh},
		{"rule 2: fresh is served even with a refresh in flight", fresh, true, recent, interval, ServeFresh},
		{"rule 2: expiry instant is stale", Data{Held: true, RefreshAt: t0, Expires: t0}, false, old, interval, StartRefresh},
		{"rule 3: stale with refresh in flight does not wait", stale, true, recent, interval, ServeStale},
		{"rule 3: nothing cached joins the refresh in flight", none, true, recent, interval, JoinFlight},
		{"rule 4: stale inside the window is served", stale, false, recent, interval, ServeStale},
		{"rule 4: nothing cached inside the window is throttled", none, false, recent, interval, RefuseThrottled},
		{"rule 5: stale after the window refreshes", stale, false, old, interval, StartRefresh},
		{"rule 5: nothing cached and never tried refreshes", none, false, never, interval, StartRefresh},
		{"rule 5: nothing cached after the window refreshes", none, false, old, interval, StartRefresh},
		{"refresh ahead: fresh, refreshed in the background", ahead, false, old, interval, StartRefresh},
		{"refresh ahead: fresh, and nothing to start inside the window", ahead, false, recent, interval, ServeFresh},
		{"refresh ahead: fresh, and nothing to start with one in flight", ahead, true, old, interval, ServeFresh},
		{"rule 7: interval 0 never throttles stale", stale, false, recent, 0, StartRefresh},
		{"rule 7: interval 0 never throttles a miss", none, false, recent, 0, StartRefresh},
		{"rule 7: interval 0 still joins a refresh in flight", none, true, recent, 0, JoinFlight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			th := tt.th
			allowed, _ := th.Allows(t0, tt.interval, false)
			assert.Equal(t, tt.want.String(), Decide(t0, tt.data, tt.inFlight, allowed).String())
		})
	}
}
