package eject

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	merrors "go-micro.dev/v4/errors"
)

func TestClassify(t *testing.T) {
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:1: connect: connection refused")
	tests := []struct {
		name string
		err  error
		want outcome
	}{
		{"success", nil, reached},
		{"connection refused", refused, absent},
		{"connection refused on Windows", merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:1: connectex: No connection could be made because the target machine actively refused it."), absent},
		{"refused, as a handler's words", merrors.InternalServerError("go.micro.client", "backoff error: connection refused"), unrelated},
		{"no route to host", merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:80: connect: no route to host"), unreachable},
		{"dial timeout", merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:80: i/o timeout"), unreachable},
		{"attempt timed out", merrors.Timeout("go.micro.client", "context deadline exceeded"), unreachable},
		{"connection broke", merrors.InternalServerError("go.micro.client.transport", "EOF"), unreachable},
		{"wrapped by a call wrapper", fmt.Errorf("tracing: %w", refused), absent},
		{"plain handler error", errors.New("business rule"), reached},
		{"handler error with the service's Id", merrors.InternalServerError("greeter", "database down"), reached},
		{"handler timeout with the service's Id", merrors.Timeout("greeter", "slow downstream"), reached},
		{"handler error with no Id", merrors.Parse("boom"), reached},
		{"4xx of the client", merrors.BadRequest("go.micro.client", "bad request"), unrelated},
		{"client codec", merrors.InternalServerError("go.micro.client.codec", "cannot encode"), unrelated},
		{"client panic", merrors.InternalServerError("go.micro.client", "panic recovered: oops"), unrelated},
		{"client backoff", merrors.InternalServerError("go.micro.client", "backoff error: stop"), unrelated},
		{"typed nil", (*merrors.Error)(nil), reached},
		{"joined with a handler error", errors.Join(errors.New("tracing"), refused), absent},
		{"two %w", fmt.Errorf("%w after %w", errors.New("retry budget"), refused), absent},
		{"joined, nested", fmt.Errorf("wrapper: %w", errors.Join(errors.New("a"), fmt.Errorf("b: %w", refused))), absent},
		{"joined handler errors", errors.Join(errors.New("a"), merrors.InternalServerError("greeter", "db")), reached},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, classify(tt.err), tt.name)
	}
}

// TestUnsent: the client's error for a connection it could not open, and
// only that one, says the request was never sent.
func TestUnsent(t *testing.T) {
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 127.0.0.1:1: connect: connection refused")
	for _, err := range []error{
		refused,
		merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.1:80: i/o timeout"),
		fmt.Errorf("tracing: %w", refused),
		errors.Join(errors.New("tracing"), refused),
	} {
		assert.True(t, Unsent(err), "%v", err)
	}
	for _, err := range []error{
		nil,
		merrors.Timeout("go.micro.client", "context deadline exceeded"),
		merrors.InternalServerError("go.micro.client.transport", "EOF"),
		merrors.InternalServerError("go.micro.client", "panic recovered: connection error"),
		merrors.InternalServerError("greeter", "connection error: dial tcp 10.0.0.1:80: connect: connection refused"),
		// A handler passing on its own call's error: the text of the
		// client's error, not the error itself.
		errors.New(refused.Error()),
		(*merrors.Error)(nil),
	} {
		assert.False(t, Unsent(err), "%v", err)
	}
}

func TestEjectionDecisions(t *testing.T) {
	c := &Config{EjectAfter: 3, BaseEjection: 30 * time.Second, MaxEjection: 2 * time.Minute, MaxEjectedPercent: 50}
	t.Run("ejection time grows by the base and stops at the max", func(t *testing.T) {
		want := []time.Duration{30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
		for i, w := range want {
			assert.Equal(t, w, ejectionTime(c, i+1), "ejection %d", i+1)
		}
		assert.Equal(t, 4, maxStreak(c))
		odd := &Config{BaseEjection: 30 * time.Second, MaxEjection: 100 * time.Second}
		assert.Equal(t, 4, maxStreak(odd))
		assert.Equal(t, 100*time.Second, ejectionTime(odd, 4))
	})
	t.Run("ejections in a row decay by one per base period", func(t *testing.T) {
		end := time.Unix(1000, 0)
		tests := []struct {
			n     int
			since time.Duration
			want  int
		}{
			{0, time.Hour, 0},
			{3, -time.Second, 3}, // still ejected
			{3, 0, 3},
			{3, 29 * time.Second, 3},
			{3, 30 * time.Second, 2},
			{3, 61 * time.Second, 1},
			{3, time.Hour, 0},
		}
		for _, tt := range tests {
			assert.Equal(t, tt.want, decayed(c, tt.n, end, end.Add(tt.since)), "%d after %v", tt.n, tt.since)
		}
	})
	t.Run("share of ejected nodes", func(t *testing.T) {
		tests := []struct {
			pct, ejected, nodes int
			want                bool
		}{
			{50, 0, 1, true}, // always one
			{0, 0, 10, true},
			{0, 1, 10, false},
			{50, 1, 2, false},
			{50, 1, 3, false},
			{50, 1, 4, true},
			{50, 2, 4, false},
			{50, 4, 10, true},
			{50, 5, 10, false},
			{100, 2, 3, true},
			{100, 3, 3, false},
		}
		for _, tt := range tests {
			c := &Config{MaxEjectedPercent: tt.pct}
			assert.Equal(t, tt.want, mayEject(c, tt.ejected, tt.nodes), "%d%%: %d of %d ejected", tt.pct, tt.ejected, tt.nodes)
		}
	})
}
