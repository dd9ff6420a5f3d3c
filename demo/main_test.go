package main

import (
	"bytes"
	"errors"
	"flag"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/logger"

	regcache "github.com/regcache/cache"
	"github.com/regcache/cache/demo/internal/storm"
)

// quiet keeps go-micro's cache from logging every failed refresh.
func quiet() {
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
}

// withFrozen is cfg with the default clients and a regcache that never
// updates after its first answer, and the default RPC clients and a
// regcache selector with passive health turned off, to show that the
// checks can fail.
func withFrozen(cfg storm.Config) storm.Config {
	cfg.Clients = storm.DefaultClients()
	for _, c := range cfg.Clients {
		if c.Name == storm.RegCache {
			cfg.Clients = append(cfg.Clients, storm.Frozen(c))
		}
	}
	cfg.RPCClients = append(storm.DefaultRPCClients(),
		storm.RegcacheSelector(healthOff, "cache.NewSelector(cache.New(reg), cache.WithEjectAfter(0))", regcache.WithEjectAfter(0)))
	return cfg
}

// healthOff is regcache's selector with passive health turned off: it
// picks the dead node as often as go-micro's selector does.
const healthOff = storm.RegCacheSelector + ", passive health off"

var (
	regWarm   = storm.Key{Client: storm.RegCache}
	regCold   = storm.Key{Client: storm.RegCache, Cold: true}
	frozenReg = storm.Key{Client: "frozen " + storm.RegCache}
)

// run runs the scenarios on the in-memory registry and logs the progress
// and the report.
func run(t *testing.T, cfg storm.Config) (*storm.Report, string) {
	t.Helper()
	quiet()
	var progress bytes.Buffer
	rep, err := storm.Run(cfg, storm.NewMemory(), &progress, false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	storm.Write(&out, rep)
	t.Logf("progress:\n%s\nreport:\n%s", progress.String(), out.String())
	if !strings.Contains(progress.String(), "done") {
		t.Errorf("progress lacks the final line:\n%s", progress.String())
	}
	return rep, out.String()
}

// eventSlack is how long after the demo's own watch stream a client's stream
// may deliver an event: the registry hands both their copy at once.
const eventSlack = 100 * time.Millisecond

// recoveryLimit is how long after the registry's return every service may
// still be served an old node or fail.
const recoveryLimit = 2 * time.Second

// maxDeadShare is the most of its attempts that regcache's selector may
// send to the dead node after its first failures there.
const maxDeadShare = 0.02

// check asserts that err is nil.
func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// checkCatches asserts that a check fails on the frozen client: one that
// passes a cache that never updates checks nothing.
func checkCatches(t *testing.T, name string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: the check passes a regcache frozen at its first answers", name)
	} else {
		t.Logf("%s catches the frozen client: %v", name, err)
	}
}

// clientPath checks the targets of the client path for regcache's
// selector, and that with its passive health off the dead node's share is
// what fails. (Its RPCs may fail too, or not: an RPC fails only if enough
// of its attempts go to the dead node.)
func clientPath(t *testing.T, rep *storm.Report) {
	t.Helper()
	check(t, storm.CheckClientPath(rep, storm.RegCacheSelector, maxDeadShare))
	err := storm.CheckClientPath(rep, healthOff, maxDeadShare)
	if !errors.Is(err, storm.ErrDeadNodeShare) {
		t.Errorf("client path: with passive health off, the check says %v; want the dead node's share over %v", err, maxDeadShare)
	} else {
		t.Logf("client path catches regcache's selector with passive health off: %v", err)
	}
}

// The demo at its default timeline (a unit of 1 s, 42 s), with fewer
// callers: regcache keeps up with every change the registry makes, on
// time. A regcache frozen at its first answers runs alongside, and every
// check must fail on it.
func TestDefaultTimeline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo's 35 s timeline")
	}
	cfg := storm.DefaultConfig()
	cfg.Concurrency = 8
	cfg.RPCRate = 50 // over 6 s, plenty; more starves a shared 2-core machine under -race
	rep, _ := run(t, withFrozen(cfg))
	claims(t, rep)

	// Rolling deployment: the watch stream's events replace the nodes.
	check(t, storm.CheckRolling(rep, regWarm, eventSlack))
	checkCatches(t, "rolling", storm.CheckRolling(rep, frozenReg, eventSlack))

	// Restart: no failed lookup once the create event has arrived.
	check(t, storm.CheckRestart(rep, regWarm, eventSlack))
	checkCatches(t, "restart", storm.CheckRestart(rep, frozenReg, eventSlack))

	// Recovery: every service current within the limit of the registry's
	// return, warm or cold.
	check(t, storm.CheckRecovery(rep, regWarm, recoveryLimit, false))
	check(t, storm.CheckRecovery(rep, regCold, recoveryLimit, false))
	checkCatches(t, "recovery", storm.CheckRecovery(rep, frozenReg, recoveryLimit, false))

	// Client path: every RPC through regcache's selector succeeds, and
	// the dead node gets almost none of its attempts.
	clientPath(t, rep)

	check(t, storm.CheckPicture(rep))
}

// Every scenario at a tenth of the default timeline, with a small registry
// latency, in 4.2 s: the report, and the checks that do not depend on the
// timeline's scale.
func TestShortTimeline(t *testing.T) {
	cfg := storm.Config{
		Duration:    4200 * time.Millisecond,
		Concurrency: 8,
		Services:    5,
		Latency:     time.Millisecond,
		Slow:        100 * time.Millisecond,
		Capacity:    4,
		RPCRate:     100,
	}
	rep, out := run(t, withFrozen(cfg))
	claims(t, rep)
	check(t, storm.CheckRolling(rep, regWarm, eventSlack))
	checkCatches(t, "rolling", storm.CheckRolling(rep, frozenReg, eventSlack))
	check(t, storm.CheckRestart(rep, regWarm, eventSlack))
	checkCatches(t, "restart", storm.CheckRestart(rep, frozenReg, eventSlack))
	clientPath(t, rep)
	picture(t, rep)

	for _, want := range []string{"Cold-start storm", "Rolling deployment", "Restart", "Registry outage", "Recovery",
		"What the numbers say", "regcache, cold", "old nodes", "calls/s", "current after", "not RPC throughput",
		"Client path", "retry policy, both", "to dead node", "after 3 failures in a row", storm.GoMicroSelector, healthOff} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// picture checks that the picture of rep draws the counts of its tables,
// slot by slot, and that the demo writes it as a PNG that decodes.
func picture(t *testing.T, rep *storm.Report) {
	t.Helper()
	check(t, storm.CheckPicture(rep))
	path := filepath.Join(t.TempDir(), defaultPicture)
	if err := storm.SavePicture(path, rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the picture does not decode: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < b.Dx() {
		t.Errorf("the picture is %d × %d px, want at least 1000 px wide and taller than wide", b.Dx(), b.Dy())
	}
}

// claims checks what the demo's summary says, at any scale.
func claims(t *testing.T, rep *storm.Report) {
	t.Helper()
	cfg := rep.Config
	row := func(p int, key storm.Key) storm.Row {
		t.Helper()
		r, ok := rep.Row(p, key)
		if !ok {
			t.Fatalf("scenario %d has no row for %v", p+1, key)
		}
		if r.Lookups == 0 {
			t.Fatalf("scenario %d: %v made no lookup", p+1, r.Key)
		}
		return r
	}
	var (
		noCache = storm.Key{Client: storm.NoCache}
		goMicro = storm.Key{Client: storm.GoMicro}
	)
	services := int64(cfg.Services)
	outage := rep.Scenarios[storm.Outage].Length()
	retry := cfg.RetryInterval()
	// At most one refresh attempt per service per retry interval, the
	// first at once: the window runs from the end of an attempt.
	bound := services * (1 + int64((outage+retry-1)/retry))

	// Cold start: regcache makes one registry call per service, however
	// many callers arrive at once. (go-micro's cache now and then makes a
	// second: its singleflight ends before the result is stored.)
	if r := row(storm.ColdStart, regWarm); r.RegistryCalls > services || r.Failed != 0 {
		t.Errorf("cold start: regcache made %d registry calls for %d services and failed %d lookups", r.RegistryCalls, services, r.Failed)
	}
	if r := row(storm.ColdStart, noCache); r.RegistryCalls != r.Lookups {
		t.Errorf("cold start: no cache made %d registry calls for %d lookups", r.RegistryCalls, r.Lookups)
	}

	// Outage, warm: regcache holds stale data for every service, so it
	// fails no lookup, and asks the registry at most once per service
	// per retry interval; go-micro's cache asks far more often; no cache
	// fails everything.
	rc := row(storm.Outage, regWarm)
	if rc.Failed != 0 {
		t.Errorf("outage: regcache failed %d of %d lookups while it held stale data", rc.Failed, rc.Lookups)
	}
	if rc.RegistryCalls > bound {
		t.Errorf("outage: regcache made %d registry calls, want at most %d (%d services, %v outage, %v retry interval)",
			rc.RegistryCalls, bound, services, outage, retry)
	}
	if gm := row(storm.Outage, goMicro); gm.RegistryCalls <= rc.RegistryCalls {
		t.Errorf("outage: go-micro's cache made %d registry calls, regcache %d; want go-micro's to make more", gm.RegistryCalls, rc.RegistryCalls)
	}
	// (A caller's lookup can start in the outage just before the
	// registry goes down.)
	if nc := row(storm.Outage, noCache); nc.Failed < nc.Lookups-int64(cfg.Concurrency) {
		t.Errorf("outage: no cache failed %d of %d lookups, want all", nc.Failed, nc.Lookups)
	}

	// Outage, cold: nothing cached, so everything fails, but regcache
	// still asks at most once per service per retry interval.
	rcc := row(storm.Outage, regCold)
	if rcc.Failed != rcc.Lookups {
		t.Errorf("outage: cold regcache failed %d of %d lookups, want all (nothing cached)", rcc.Failed, rcc.Lookups)
	}
	if rcc.RegistryCalls > bound {
		t.Errorf("outage: cold regcache made %d registry calls, want at most %d", rcc.RegistryCalls, bound)
	}

	// Client path: go-micro's selector keeps no health, so about a third
	// of its attempts go to the dead node: it is in the cached data.
	if x, ok := rep.RPCRowOf(storm.GoMicroSelector); !ok || x.Attempts == 0 {
		t.Errorf("client path: %s made no attempt", storm.GoMicroSelector)
	} else if x.DeadShare() < 0.15 {
		t.Errorf("client path: %s sent %d of %d attempts to the dead node, want about a third", storm.GoMicroSelector, x.DeadAttempts, x.Attempts)
	}

	// Recovery: once the registry is back, the warm clients fail
	// nothing. (Lookups without a cache that start before it is back
	// fail.)
	back := rep.Scenarios[storm.Recovery].Origin
	for _, key := range []storm.Key{noCache, goMicro, regWarm} {
		if r := row(storm.Recovery, key); r.LastFailed > back {
			t.Errorf("recovery: %v failed %d lookups, the last %v after the registry was back", key, r.Failed, r.LastFailed-back)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{nil, ""},
		{[]string{"-duration", "12s", "-concurrency", "128", "-services", "50", "-latency", "50ms", "-slow", "250ms", "-capacity", "0", "-rpc-rate", "50", "-png", ""}, ""},
		{[]string{"-duration", "1s"}, "-duration must be between"},
		{[]string{"-duration", "2h"}, "-duration must be between"},
		{[]string{"-concurrency", "0"}, "-concurrency must be between"},
		{[]string{"-concurrency", "-3"}, "-concurrency must be between"},
		{[]string{"-services", "0"}, "-services must be between"},
		{[]string{"-services", "100000"}, "-services must be between"},
		{[]string{"-latency", "-1ms"}, "-latency must not be negative"},
		{[]string{"-slow", "10ms"}, "-slow (10ms) must not be below -latency"},
		{[]string{"-slow", "2s"}, "-slow (2s) must not exceed a unit, -duration/42 (1s)"},
		{[]string{"-capacity", "-1"}, "-capacity must not be negative"},
		{[]string{"-rpc-rate", "0"}, "-rpc-rate must be between"},
		{[]string{"-rpc-rate", "5001"}, "-rpc-rate must be between"},
		{[]string{"-concurrency", "many"}, "invalid value"},
		{[]string{"-nope"}, "flag provided but not defined"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-figures", "f.json", "-png", "d.png"}, ""},
		{[]string{"-figures", "f.json", "-phases"}, "-figures runs the -phases runs itself"},
		{[]string{"-figures", "f.json", "-services", "50"}, "leave the simulation's flags at their defaults"},
		{[]string{"-figures", "f.json", "-outage-end", "0.5"}, "leave the simulation's flags at their defaults"},
	} {
		var stderr bytes.Buffer
		_, _, err := parseFlags(tc.args, &stderr)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.want)
		case tc.want != "" && !strings.Contains(stderr.String(), tc.want):
			t.Errorf("%q: stderr %q does not say %q", tc.args, stderr.String(), tc.want)
		}
	}
	if _, _, err := parseFlags([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, defaultPicture}, {[]string{"-png", "/tmp/x.png"}, "/tmp/x.png"}, {[]string{"-png="}, ""}} {
		if _, opts, err := parseFlags(tc.args, io.Discard); err != nil || opts.png != tc.want {
			t.Errorf("%q: picture %q (%v), want %q", tc.args, opts.png, err, tc.want)
		}
	}
}
