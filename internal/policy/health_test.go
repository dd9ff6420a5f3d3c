package policy

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errDown = errors.New("down")

// The registry is held down on evidence: failures of two different keys in
// a row with no answer between them. A key that fails again, a failure
// with an answer in between, or a call from before the registry came back
// is no evidence.
func TestHealthGoesDownOnTwoKeys(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name  string
		steps func(h *Health) Verdict
		down  bool
	}{
		{"one key", func(h *Health) Verdict { return h.Failed("a", errDown, t0, t0) }, false},
		{"one key twice", func(h *Health) Verdict {
			h.Failed("a", errDown, t0, t0)
			return h.Failed("a", errDown, at(1), at(1))
		}, false},
		{"two keys", func(h *Health) Verdict {
			h.Failed("a", errDown, t0, t0)
			return h.Failed("b", errDown, t0, at(1))
		}, true},
		{"the stream and its redial", func(h *Health) Verdict {
			h.Failed(StreamSuspect, errDown, t0, t0)
			return h.Failed(RedialSuspect, errDown, t0, at(1))
		}, true},
		{"an answer between", func(h *Health) Verdict {
			h.Failed("a", errDown, t0, t0)
			h.Answered("c", at(1))
			return h.Failed("b", errDown, at(1), at(2))
		}, false},
		{"a key that kept failing", func(h *Health) Verdict {
			h.Failed("a", errDown, t0, t0)
			h.Answered("c", at(1))
			h.Failed("b", errDown, at(1), at(2))
			h.Answered("c", at(3))
			return h.Failed("b", errDown, at(3), at(4)) // b's last call failed: no evidence
		}, false},
		{"a call from before the registry came back", func(h *Health) Verdict {
			h.Back = at(10)
			h.Failed("a", errDown, at(11), at(11))
			return h.Failed("b", errDown, at(9), at(12))
		}, false},
		{"off", func(h *Health) Verdict {
			h.Interval = 0
			h.Failed("a", errDown, t0, t0)
			return h.Failed("b", errDown, t0, at(1))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Health{Interval: time.Second}
			v := tc.steps(h)
			assert.Equal(t, tc.down, h.Down)
			assert.Equal(t, tc.down, v.WentDown)
			if tc.down {
				assert.Equal(t, uint64(1), h.Outages)
				ok, probe := h.Allows(h.LastProbe.Add(h.Interval))
				assert.True(t, ok && probe, "the first probe may go at once")
			}
		})
	}
}

// While down, one probe an interval goes through; a probe still out for
// SlowCall counts as failed and lets the next one go an interval later;
// any answer brings the registry up, and the outage's time is counted.
func TestHealthProbesAtAFixedPace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Health{Interval: time.Second}
	h.Failed("a", errDown, t0, t0)
	h.Failed("b", errDown, t0, t0)
	require.True(t, h.Down)

	ok, probe := h.Allows(t0)
	require.True(t, ok && probe)
	h.Probing(1, t0)
	ok, _ = h.Allows(t0.Add(500 * time.Millisecond))
	assert.False(t, ok, "one probe at a time")
	assert.Equal(t, t0.Add(SlowCall+time.Second), h.NextProbe(), "a probe out counts as ended at its deadline")
	ok, probe = h.Allows(t0.Add(SlowCall + time.Second))
	require.True(t, ok && probe, "the hung probe no longer holds the next one back")
	h.Probing(2, t0.Add(SlowCall+time.Second))
	assert.Equal(t, 1, h.Probes, "the overtaken probe counts as failed")
	assert.False(t, h.Probed(1, t0.Add(3*time.Second)), "overtaken: counted already")
	assert.True(t, h.Probed(2, t0.Add(3*time.Second)))
	assert.Equal(t, t0.Add(4*time.Second), h.NextProbe())

	v := h.Answered("a", t0.Add(5*time.Second))
	assert.True(t, v.WentUp)
	assert.False(t, h.Down)
	assert.Equal(t, t0.Add(5*time.Second), h.Back)
	assert.Equal(t, 5*time.Second, h.DownTime)
	ok, probe = h.Allows(t0.Add(5 * time.Second))
	assert.True(t, ok && !probe, "up: every call goes, none is the probe")
}

// A service that failed alone and answers again asks for a resync: the
// registry may have been out without the cache noticing.
func TestHealthResyncAfterALoneFailure(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Health{Interval: time.Second}
	h.Failed("a", errDown, t0, t0)
	assert.True(t, h.Answered("a", t0.Add(time.Second)).Resync)
	h.Failed("a", errDown, t0, t0.Add(2*time.Second))
	assert.False(t, h.Answered("b", t0.Add(3*time.Second)).Resync, "another key's answer says nothing of a")
}

// The record of failing keys is bounded, and forgets a key after a while.
func TestHealthFailingKeysAreBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Health{Interval: time.Second}
	for i := 0; i < 3*maxFailing; i++ {
		h.Failed(fmt.Sprint(i), errDown, t0, t0.Add(time.Duration(i)))
		h.Answered("ok", t0.Add(time.Duration(i)))
	}
	assert.LessOrEqual(t, len(h.failing), maxFailing)
	assert.True(t, h.evidence("x", t0), "a new key is evidence")
	assert.False(t, h.evidence("x", t0.Add(time.Second)), "then not, while it keeps failing")
	assert.True(t, h.evidence("x", t0.Add(failingMemory+time.Second)), "until it is forgotten")
}
