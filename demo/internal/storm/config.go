// Package storm runs the demo's storm simulation: the same scenario script
// against three clients of one service registry (no cache, go-micro's
// registry/cache, regcache), with latency and faults injected around the
// registry, and reports what each client's callers saw.
//
// The registry itself is a Backend: go-micro's in-memory registry for
// `make demo`, an embedded etcd for `make demo-etcd`.
package storm

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"
)

// Config is what the flags of both demos set.
type Config struct {
	// Duration is the length of the whole simulation, 42 units. Every
	// scenario, the cache TTL and regcache's retry interval scale with it;
	// at the default of 42 s a unit is a second and the outage lasts 10 s.
	Duration time.Duration
	// Concurrency is the number of callers per client, each looking up one
	// service after another with a 1 ms pause in between.
	Concurrency int
	// Services is the number of services registered.
	Services int
	// Latency is what every registry call costs when the registry is well.
	Latency time.Duration
	// Slow is what a registry call costs during the rolling deployment.
	Slow time.Duration
	// Capacity is how many calls the registry serves at a time for each
	// client; more wait their turn. Zero means no limit.
	Capacity int
	// RPCRate is how many RPCs arrive per second at each RPC client in
	// the client path.
	RPCRate int

	// OutageEnd moves the end of the outage later by this fraction of the
	// retry interval, 0 ≤ OutageEnd < 1. At 0 the outage lasts 10 units,
	// two retry intervals: it ends as the cold caches, started with it,
	// may retry. Other values end it at other phases of their interval.
	OutageEnd float64
	// Only, if not nil, lists the scenarios that run; the others take no
	// time, start nothing and have no rows. No flag sets it.
	Only []int

	// Clients are the clients compared; nil for DefaultClients. No flag
	// sets it.
	Clients []Client
	// RPCClients are the selectors compared in the client path; nil for
	// DefaultRPCClients. No flag sets it.
	RPCClients []RPCClient
}

// DefaultConfig is the configuration of a plain `make demo`.
func DefaultConfig() Config {
	return Config{
		Duration:    42 * time.Second,
		Concurrency: 64,
		Services:    20,
		Latency:     20 * time.Millisecond,
		Slow:        time.Second,
		Capacity:    8,
		RPCRate:     200,
	}
}

// Limits of the flags.
const (
	MinDuration    = 3 * time.Second
	MaxDuration    = time.Hour
	MaxConcurrency = 10000
	MaxServices    = 10000
	MaxRPCRate     = 5000
)

// Flags registers the flags on fs, with c's values as their defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Duration, "duration", c.Duration,
		fmt.Sprintf("length of the whole simulation, %d units; scenarios, TTL and retry interval scale with it (the outage is 10 units)", totalUnits()))
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "callers per client")
	fs.IntVar(&c.Services, "services", c.Services, "services registered")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "latency of a registry call")
	fs.DurationVar(&c.Slow, "slow", c.Slow, fmt.Sprintf("latency of a registry call during the rolling deployment (at most a unit, -duration/%d)", totalUnits()))
	fs.IntVar(&c.Capacity, "capacity", c.Capacity, "registry calls served at a time per client, the rest queue (0: no limit)")
	fs.IntVar(&c.RPCRate, "rpc-rate", c.RPCRate, "RPCs per second through each selector in the client path")
	fs.Float64Var(&c.OutageEnd, "outage-end", c.OutageEnd, "end the outage later by this fraction of the retry interval, from 0 (10 units, two intervals) to below 1")
}

// Unit is the time unit of the timeline: Duration/42, one second by
// default.
func (c Config) Unit() time.Duration { return c.Duration / time.Duration(totalUnits()) }

// TTL is the cache TTL of both caches: five units, 5 s by default, so that
// the entries filled in the cold start expire together during the rolling
// deployment.
func (c Config) TTL() time.Duration { return 5 * c.Unit() }

// RetryInterval is regcache's MinimumRetryInterval: five units, which is
// the library's default (5 s) at the default duration.
func (c Config) RetryInterval() time.Duration { return 5 * c.Unit() }

// RestartGap is the time between the old instance's deregistration and the
// new one's registration in the restart: a fifth of a unit, 200 ms by
// default.
func (c Config) RestartGap() time.Duration { return c.Unit() / 5 }

// Validate reports the first invalid value, naming its flag.
func (c Config) Validate() error {
	switch {
	case c.Duration < MinDuration || c.Duration > MaxDuration:
		return fmt.Errorf("-duration must be between %v and %v, got %v", MinDuration, MaxDuration, c.Duration)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("-concurrency must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	case c.Services < 1 || c.Services > MaxServices:
		return fmt.Errorf("-services must be between 1 and %d, got %d", MaxServices, c.Services)
	case c.Latency < 0:
		return fmt.Errorf("-latency must not be negative, got %v", c.Latency)
	case c.Slow < c.Latency:
		return fmt.Errorf("-slow (%v) must not be below -latency (%v)", c.Slow, c.Latency)
	case c.Slow > c.Unit():
		return fmt.Errorf("-slow (%v) must not exceed a unit, -duration/%d (%v), or the rolling deployment is over before a slow call returns", c.Slow, totalUnits(), c.Unit())
	case c.Capacity < 0:
		return fmt.Errorf("-capacity must not be negative, got %d", c.Capacity)
	case c.RPCRate < 1 || c.RPCRate > MaxRPCRate:
		return fmt.Errorf("-rpc-rate must be between 1 and %d, got %d", MaxRPCRate, c.RPCRate)
	case !(c.OutageEnd >= 0 && c.OutageEnd < 1):
		return fmt.Errorf("-outage-end must be at least 0 and below 1, got %v", c.OutageEnd)
	}
	return nil
}

// runs says whether scenario p runs (Only).
func (c Config) runs(p int) bool { return c.Only == nil || slices.Contains(c.Only, p) }

// length is scenario p's scheduled length: its units, the outage longer by
// OutageEnd retry intervals, and 0 for a scenario that does not run.
func (c Config) length(p int) time.Duration {
	if !c.runs(p) {
		return 0
	}
	d := time.Duration(script[p].units) * c.Unit()
	if p == Outage {
		d += time.Duration(c.OutageEnd * float64(c.RetryInterval()))
	}
	return d
}

// total is the run's scheduled length.
func (c Config) total() time.Duration {
	var d time.Duration
	for p := range script {
		d += c.length(p)
	}
	return d
}

// ErrUnavailable is what the in-memory registry returns during the outage.
var ErrUnavailable = errors.New("registry unavailable (simulated outage)")
