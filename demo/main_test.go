package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/logger"

	"github.com/regcache/cache/demo/internal/storm"
)

// smokeConfig is the demo at a tenth of its default length, with a small
// registry latency: every scenario runs, in 3 s.
func smokeConfig() storm.Config {
	return storm.Config{
		Duration:    3 * time.Second,
		Concurrency: 8,
		Services:    5,
		Latency:     time.Millisecond,
		Slow:        50 * time.Millisecond,
		Capacity:    4,
	}
}

// The demo's claims, checked on a short run of every scenario.
func TestScenarios(t *testing.T) {
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	cfg := smokeConfig()
	var progress bytes.Buffer
	rep, err := storm.Run(cfg, storm.NewMemory(), &progress, false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	storm.Write(&out, rep)
	t.Logf("progress:\n%s\nreport:\n%s", progress.String(), out.String())

	row := func(p int, client string, cold bool) storm.Row {
		t.Helper()
		r, ok := rep.Row(p, storm.Key{Client: client, Cold: cold})
		if !ok {
			t.Fatalf("scenario %d has no row for %v", p+1, storm.Key{Client: client, Cold: cold})
		}
		if r.Lookups == 0 {
			t.Fatalf("scenario %d: %v made no lookup", p+1, r.Key)
		}
		return r
	}
	services := int64(cfg.Services)
	outage := rep.Scenarios[storm.Outage].End - rep.Scenarios[storm.Outage].Start
	retry := cfg.RetryInterval()
	// At most one refresh attempt per service per retry interval, the
	// first at once: the window runs from the end of an attempt.
	bound := services * (1 + int64((outage+retry-1)/retry))

	// Cold start: regcache makes one registry call per service, however
	// many callers arrive at once. (go-micro's cache now and then makes a
	// second: its singleflight ends before the result is stored.)
	if r := row(storm.ColdStart, storm.RegCache, false); r.RegistryCalls > services || r.Failed != 0 {
		t.Errorf("cold start: regcache made %d registry calls for %d services and failed %d lookups", r.RegistryCalls, services, r.Failed)
	}
	if r := row(storm.ColdStart, storm.NoCache, false); r.RegistryCalls != r.Lookups {
		t.Errorf("cold start: no cache made %d registry calls for %d lookups", r.RegistryCalls, r.Lookups)
	}

	// Outage, warm: regcache holds stale data for every service, so it
	// fails no lookup, and asks the registry at most once per service
	// per retry interval; go-micro's cache asks far more often; no cache
	// fails everything.
	rc := row(storm.Outage, storm.RegCache, false)
	if rc.Failed != 0 {
		t.Errorf("outage: regcache failed %d of %d lookups while it held stale data", rc.Failed, rc.Lookups)
	}
	if rc.RegistryCalls > bound {
		t.Errorf("outage: regcache made %d registry calls, want at most %d (%d services, %v outage, %v retry interval)",
			rc.RegistryCalls, bound, services, outage, retry)
	}
	if gm := row(storm.Outage, storm.GoMicro, false); gm.RegistryCalls <= rc.RegistryCalls {
		t.Errorf("outage: go-micro's cache made %d registry calls, regcache %d; want go-micro's to make more", gm.RegistryCalls, rc.RegistryCalls)
	}
	if nc := row(storm.Outage, storm.NoCache, false); nc.Failed != nc.Lookups {
		t.Errorf("outage: no cache failed %d of %d lookups, want all", nc.Failed, nc.Lookups)
	}

	// Outage, cold: nothing cached, so everything fails, but regcache
	// still asks at most once per service per retry interval.
	rcc := row(storm.Outage, storm.RegCache, true)
	if rcc.Failed != rcc.Lookups {
		t.Errorf("outage: cold regcache failed %d of %d lookups, want all (nothing cached)", rcc.Failed, rcc.Lookups)
	}
	if rcc.RegistryCalls > bound {
		t.Errorf("outage: cold regcache made %d registry calls, want at most %d", rcc.RegistryCalls, bound)
	}

	// Recovery: the warm clients fail nothing, and regcache serves the
	// new nodes within a retry interval and a watch reconnect.
	for _, client := range []string{storm.NoCache, storm.GoMicro, storm.RegCache} {
		if r := row(storm.Recovery, client, false); r.Failed != 0 {
			t.Errorf("recovery: %s failed %d lookups", client, r.Failed)
		}
	}
	if r := row(storm.Recovery, storm.RegCache, false); r.Old > 0 && r.LastOld > 2*retry {
		t.Errorf("recovery: regcache served old nodes until %v after the registry came back, want within %v", r.LastOld, 2*retry)
	}

	for _, want := range []string{"Cold-start storm", "Rolling deployment", "Registry outage", "Recovery", "What the numbers say", "regcache, cold"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(progress.String(), "done") {
		t.Errorf("progress lacks the final line:\n%s", progress.String())
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, ""},
		{[]string{"-duration", "10s", "-concurrency", "128", "-services", "50", "-latency", "50ms", "-slow", "300ms", "-capacity", "0"}, ""},
		{[]string{"-duration", "1s"}, "-duration must be between"},
		{[]string{"-duration", "2h"}, "-duration must be between"},
		{[]string{"-concurrency", "0"}, "-concurrency must be between"},
		{[]string{"-concurrency", "-3"}, "-concurrency must be between"},
		{[]string{"-services", "0"}, "-services must be between"},
		{[]string{"-services", "100000"}, "-services must be between"},
		{[]string{"-latency", "-1ms"}, "-latency must not be negative"},
		{[]string{"-slow", "10ms"}, "-slow (10ms) must not be below -latency"},
		{[]string{"-slow", "2s"}, "-slow (2s) must not exceed -duration/30"},
		{[]string{"-capacity", "-1"}, "-capacity must not be negative"},
		{[]string{"-concurrency", "many"}, "invalid value"},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var stderr bytes.Buffer
		_, err := parseFlags(tc.args, &stderr)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		case tc.want != "" && !strings.Contains(stderr.String(), tc.want):
			t.Errorf("%q: stderr %q does not say %q", tc.args, stderr.String(), tc.want)
		}
	}
	if _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}
