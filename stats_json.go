package cache

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// The JSON of Stats, Options, ServiceStats and EjectedNode writes each
// duration as a number of seconds, under its field's name with "_seconds"
// after it. The methods below put a seconds field over each duration
// field: encoding/json takes the outer field of two with the same name.

// MarshalJSON writes s with its durations in seconds.
func (s Stats) MarshalJSON() ([]byte, error) {
	type fields Stats
	return json.Marshal(struct {
		fields
		DownTime          seconds `json:"down_time_seconds"`
		OldestStaleServed seconds `json:"oldest_stale_served_seconds"`
	}{fields(s), seconds(s.DownTime), seconds(s.OldestStaleServed)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Stats) UnmarshalJSON(data []byte) error {
	type fields Stats
	in := struct {
		*fields
		DownTime          seconds `json:"down_time_seconds"`
		OldestStaleServed seconds `json:"oldest_stale_served_seconds"`
	}{(*fields)(s), seconds(s.DownTime), seconds(s.OldestStaleServed)}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	s.DownTime, s.OldestStaleServed = time.Duration(in.DownTime), time.Duration(in.OldestStaleServed)
	return nil
}

// MarshalJSON writes o with its durations in seconds, without the Logger
// and the Observer.
func (o Options) MarshalJSON() ([]byte, error) {
	type fields Options
	return json.Marshal(struct {
		fields
		TTL                  seconds `json:"ttl_seconds"`
		MinimumRetryInterval seconds `json:"minimum_retry_interval_seconds"`
		MaxRetryInterval     seconds `json:"max_retry_interval_seconds"`
		MaxStale             seconds `json:"max_stale_seconds"`
		IdleEviction         seconds `json:"idle_eviction_seconds"`
		ProbeInterval        seconds `json:"probe_interval_seconds"`
	}{fields(o), seconds(o.TTL), seconds(o.MinimumRetryInterval), seconds(o.MaxRetryInterval),
		seconds(o.MaxStale), seconds(o.IdleEviction), seconds(o.ProbeInterval)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (o *Options) UnmarshalJSON(data []byte) error {
	type fields Options
	in := struct {
		*fields
		TTL                  seconds `json:"ttl_seconds"`
		MinimumRetryInterval seconds `json:"minimum_retry_interval_seconds"`
		MaxRetryInterval     seconds `json:"max_retry_interval_seconds"`
		MaxStale             seconds `json:"max_stale_seconds"`
		IdleEviction         seconds `json:"idle_eviction_seconds"`
		ProbeInterval        seconds `json:"probe_interval_seconds"`
	}{(*fields)(o), seconds(o.TTL), seconds(o.MinimumRetryInterval), seconds(o.MaxRetryInterval),
		seconds(o.MaxStale), seconds(o.IdleEviction), seconds(o.ProbeInterval)}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	o.TTL, o.MinimumRetryInterval, o.MaxRetryInterval = time.Duration(in.TTL), time.Duration(in.MinimumRetryInterval), time.Duration(in.MaxRetryInterval)
	o.MaxStale, o.IdleEviction, o.ProbeInterval = time.Duration(in.MaxStale), time.Duration(in.IdleEviction), time.Duration(in.ProbeInterval)
	return nil
}

// MarshalJSON writes s with its age in seconds.
func (s ServiceStats) MarshalJSON() ([]byte, error) {
	type fields ServiceStats
	return json.Marshal(struct {
		fields
		Age seconds `json:"age_seconds"`
	}{fields(s), seconds(s.Age)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *ServiceStats) UnmarshalJSON(data []byte) error {
	type fields ServiceStats
	in := struct {
		*fields
		Age seconds `json:"age_seconds"`
	}{(*fields)(s), seconds(s.Age)}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	s.Age = time.Duration(in.Age)
	return nil
}

// MarshalJSON writes e with the time until its return in seconds.
func (e EjectedNode) MarshalJSON() ([]byte, error) {
	type fields EjectedNode
	return json.Marshal(struct {
		fields
		Remaining seconds `json:"remaining_seconds"`
	}{fields(e), seconds(e.Remaining)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *EjectedNode) UnmarshalJSON(data []byte) error {
	type fields EjectedNode
	in := struct {
		*fields
		Remaining seconds `json:"remaining_seconds"`
	}{(*fields)(e), seconds(e.Remaining)}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	e.Remaining = time.Duration(in.Remaining)
	return nil
}

// seconds is a duration in JSON: a number of seconds, written exactly
// (1.5, 0.000000001), so that it reads back to the nanosecond.
type seconds time.Duration

func (s seconds) MarshalJSON() ([]byte, error) {
	return appendSeconds(make([]byte, 0, 24), time.Duration(s)), nil
}

func (s *seconds) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	d, err := parseSeconds(string(data))
	if err != nil {
		return err
	}
	*s = seconds(d)
	return nil
}

// appendSeconds appends d in seconds, in decimal, with no trailing zero.
func appendSeconds(b []byte, d time.Duration) []byte {
	u := uint64(d)
	if d < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/1e9, 10)
	frac := u % 1e9
	if frac == 0 {
		return b
	}
	digits := [9]byte{'0', '0', '0', '0', '0', '0', '0', '0', '0'}
	end := 0
	for i := len(digits) - 1; frac > 0; i-- {
		digits[i] = byte('0' + frac%10)
		if end == 0 && digits[i] != '0' {
			end = i + 1
		}
		frac /= 10
	}
	return append(append(b, '.'), digits[:end]...)
}

// errSeconds is the error of a JSON value that is not a duration in
// seconds.
var errSeconds = errors.New("regcache: not a duration in seconds")

// parseSeconds reads a JSON number of seconds: exactly when it is written
// as appendSeconds writes it, to the nearest nanosecond with an exponent.
func parseSeconds(s string) (time.Duration, error) {
	if strings.ContainsAny(s, "eE") {
		f, err := strconv.ParseFloat(s, 64)
		ns := math.Round(f * 1e9)
		if err != nil || math.IsNaN(ns) || ns >= math.MaxInt64 || ns < math.MinInt64 {
			return 0, errSeconds
		}
		return time.Duration(ns), nil
	}
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return 0, errSeconds // ParseDuration would take "+1" and ".5"
	}
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		return 0, errSeconds
	}
	return d, nil
}
