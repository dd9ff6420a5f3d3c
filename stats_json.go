package cache

import (
	"encoding/json"
	"errors"
	"math"
	"time"
)

// The JSON of Stats, Options, ServiceStats, EjectedNode and LimboNode writes each
// duration as a number of seconds, under its field's name with "_seconds"
// after it. The methods below put a float64 field of seconds over each
// duration field: encoding/json takes the outer of two fields with the
// same name, and writes a float64 without a call of its own. Seconds read
// back to the nanosecond below 48 days, and to within a few nanoseconds
// above.

// MarshalJSON writes s with its durations in seconds.
func (s Stats) MarshalJSON() ([]byte, error) {
	type fields Stats
	return json.Marshal(struct {
		fields
		DownTime       float64 `json:"down_time_seconds"`
		StaleServedAge float64 `json:"stale_served_age_seconds"`
	}{fields(s), s.DownTime.Seconds(), s.StaleServedAge.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Stats) UnmarshalJSON(data []byte) error {
	type fields Stats
	in := struct {
		*fields
		DownTime       float64 `json:"down_time_seconds"`
		StaleServedAge float64 `json:"stale_served_age_seconds"`
	}{(*fields)(s), s.DownTime.Seconds(), s.StaleServedAge.Seconds()}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var err error
	s.DownTime, s.StaleServedAge = duration(in.DownTime, &err), duration(in.StaleServedAge, &err)
	return err
}

// MarshalJSON writes o with its durations in seconds, without the Logger
// and the Observer.
func (o Options) MarshalJSON() ([]byte, error) {
	type fields Options
	return json.Marshal(struct {
		fields
		TTL                  float64 `json:"ttl_seconds"`
		MinimumRetryInterval float64 `json:"minimum_retry_interval_seconds"`
		MaximumRetryInterval float64 `json:"maximum_retry_interval_seconds"`
		MaximumStale         float64 `json:"maximum_stale_seconds"`
		IdleEviction         float64 `json:"idle_eviction_seconds"`
		ProbeInterval        float64 `json:"probe_interval_seconds"`
	}{fields(o), o.TTL.Seconds(), o.MinimumRetryInterval.Seconds(), o.MaximumRetryInterval.Seconds(),
		o.MaximumStale.Seconds(), o.IdleEviction.Seconds(), o.ProbeInterval.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Options) UnmarshalJSON(data []byte) error {
	type fields Options
	in := struct {
		*fields
		TTL                  float64 `json:"ttl_seconds"`
		MinimumRetryInterval float64 `json:"minimum_retry_interval_seconds"`
		MaximumRetryInterval float64 `json:"maximum_retry_interval_seconds"`
		MaximumStale         float64 `json:"maximum_stale_seconds"`
		IdleEviction         float64 `json:"idle_eviction_seconds"`
		ProbeInterval        float64 `json:"probe_interval_seconds"`
	}{(*fields)(o), o.TTL.Seconds(), o.MinimumRetryInterval.Seconds(), o.MaximumRetryInterval.Seconds(),
		o.MaximumStale.Seconds(), o.IdleEviction.Seconds(), o.ProbeInterval.Seconds()}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var err error
	o.TTL, o.MinimumRetryInterval = duration(in.TTL, &err), duration(in.MinimumRetryInterval, &err)
	o.MaximumRetryInterval, o.MaximumStale = duration(in.MaximumRetryInterval, &err), duration(in.MaximumStale, &err)
	o.IdleEviction, o.ProbeInterval = duration(in.IdleEviction, &err), duration(in.ProbeInterval, &err)
	return err
}

// MarshalJSON writes s with its age in seconds.
func (s ServiceStats) MarshalJSON() ([]byte, error) {
	type fields ServiceStats
	return json.Marshal(struct {
		fields
		Age float64 `json:"age_seconds"`
	}{fields(s), s.Age.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *ServiceStats) UnmarshalJSON(data []byte) error {
	type fields ServiceStats
	in := struct {
		*fields
		Age float64 `json:"age_seconds"`
	}{(*fields)(s), s.Age.Seconds()}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var err error
	s.Age = duration(in.Age, &err)
	return err
}

// MarshalJSON writes e with the time until its return in seconds.
func (e EjectedNode) MarshalJSON() ([]byte, error) {
	type fields EjectedNode
	return json.Marshal(struct {
		fields
		Remaining float64 `json:"remaining_seconds"`
	}{fields(e), e.Remaining.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *EjectedNode) UnmarshalJSON(data []byte) error {
	type fields EjectedNode
	in := struct {
		*fields
		Remaining float64 `json:"remaining_seconds"`
	}{(*fields)(e), e.Remaining.Seconds()}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var err error
	e.Remaining = duration(in.Remaining, &err)
	return err
}

// MarshalJSON writes l with its durations in seconds.
func (l LimboNode) MarshalJSON() ([]byte, error) {
	type fields LimboNode
	return json.Marshal(struct {
		fields
		Age       float64 `json:"age_seconds"`
		Remaining float64 `json:"remaining_seconds"`
	}{fields(l), l.Age.Seconds(), l.Remaining.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *LimboNode) UnmarshalJSON(data []byte) error {
	type fields LimboNode
	in := struct {
		*fields
		Age       float64 `json:"age_seconds"`
		Remaining float64 `json:"remaining_seconds"`
	}{(*fields)(l), l.Age.Seconds(), l.Remaining.Seconds()}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	var err error
	l.Age, l.Remaining = duration(in.Age, &err), duration(in.Remaining, &err)
	return err
}

// errSeconds is the error of a number of seconds that no duration holds.
var errSeconds = errors.New("regcache: seconds out of a duration's range")

// duration is secs seconds, to the nearest nanosecond; it sets *err for
// a number that no duration holds.
func duration(secs float64, err *error) time.Duration {
	ns := math.Round(secs * 1e9)
	if !(ns >= math.MinInt64 && ns < math.MaxInt64) {
		*err = errSeconds
		return 0
	}
	return time.Duration(ns)
}
