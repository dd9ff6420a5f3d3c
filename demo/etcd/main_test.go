package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v4/logger"

	regcache "github.com/regcache/cache"
	"github.com/regcache/cache/demo/internal/storm"
)

// A run at two fifths of the default timeline against a real embedded
// etcd: etcd is stopped for the outage and restarted for the recovery, and
// stopped again in the client path, where an instance of the RPC service
// is killed. A regcache frozen at its first answers runs alongside, and a
// regcache selector with passive health off: every check of regcache must
// fail on them.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	b, err := startEtcd(200 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := storm.Config{
		Duration:    16800 * time.Millisecond, // a unit of 400 ms: the outage lasts 4 s
		Concurrency: 8,
		Services:    5,
		Latency:     time.Millisecond,
		Slow:        400 * time.Millisecond,
		Capacity:    4,
		RPCRate:     100,
		Clients:     storm.DefaultClients(),
	}
	for _, c := range cfg.Clients {
		if c.Name == storm.RegCache {
			cfg.Clients = append(cfg.Clients, storm.Frozen(c))
		}
	}
	const healthOff = storm.RegCacheSelector + ", passive health off"
	cfg.RPCClients = append(storm.DefaultRPCClients(),
		storm.RegcacheSelector(healthOff, "cache.NewSelector(cache.New(reg), cache.WithEjectAfter(0))", regcache.WithEjectAfter(0)))
	var progress bytes.Buffer
	rep, err := storm.Run(cfg, b, &progress, false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	storm.Write(&out, rep)
	t.Logf("progress:\n%s\nreport:\n%s", progress.String(), out.String())

	// The picture draws the tables' counts, slot by slot.
	if err := storm.CheckPicture(rep); err != nil {
		t.Error(err)
	}

	var (
		warm   = storm.Key{Client: storm.RegCache}
		cold   = storm.Key{Client: storm.RegCache, Cold: true}
		frozen = storm.Key{Client: "frozen " + storm.RegCache}
	)
	rc, ok := rep.Row(storm.Outage, warm)
	if !ok || rc.Lookups == 0 {
		t.Fatalf("no regcache lookups in the outage")
	}
	if rc.Failed != 0 {
		t.Errorf("outage: regcache failed %d of %d lookups while it held stale data", rc.Failed, rc.Lookups)
	}
	outage := rep.Scenarios[storm.Outage].Length()
	retry := cfg.RetryInterval()
	if bound := int64(cfg.Services) * (1 + int64((outage+retry-1)/retry)); rc.RegistryCalls > bound {
		t.Errorf("outage: regcache made %d registry calls, want at most %d", rc.RegistryCalls, bound)
	}
	if nc, _ := rep.Row(storm.Outage, storm.Key{Client: storm.NoCache}); nc.Failed == 0 {
		t.Errorf("outage: no cache failed no lookup with etcd stopped")
	}
	if !strings.Contains(out.String(), "embedded etcd") {
		t.Errorf("report does not name the registry:\n%s", out.String())
	}

	// The watch stream's events, through the plugin: the rolling
	// deployment's replacements, and the restart's new node.
	const slack = 100 * time.Millisecond
	check(t, storm.CheckRolling(rep, warm, slack))
	catches(t, "rolling", storm.CheckRolling(rep, frozen, slack))
	check(t, storm.CheckRestart(rep, warm, slack))
	catches(t, "restart", storm.CheckRestart(rep, frozen, slack))

	// Recovery: once its etcd client reaches the restarted etcd (each
	// client reconnects on its own backoff), regcache serves every
	// service's new node within 2 s, warm or cold, and the warm one fails
	// no lookup after the registry is back.
	const limit = 2 * time.Second
	check(t, storm.CheckRecovery(rep, warm, limit, true))
	check(t, storm.CheckRecovery(rep, cold, limit, true))
	catches(t, "recovery", storm.CheckRecovery(rep, frozen, limit, true))
	if r, _ := rep.Row(storm.Recovery, warm); r.LastFailed > rep.Scenarios[storm.Recovery].Origin {
		t.Errorf("recovery: regcache failed %d lookups, the last %v after etcd was back", r.Failed, r.LastFailed-rep.Scenarios[storm.Recovery].Origin)
	}

	// Client path, with etcd stopped and an instance killed: every RPC
	// through regcache's selector succeeds, and the dead node gets almost
	// none of its attempts; not so with its passive health off.
	const maxDeadShare = 0.02
	check(t, storm.CheckClientPath(rep, storm.RegCacheSelector, maxDeadShare))
	if err := storm.CheckClientPath(rep, healthOff, maxDeadShare); !errors.Is(err, storm.ErrDeadNodeShare) {
		t.Errorf("client path: with passive health off, the check says %v; want the dead node's share over %v", err, maxDeadShare)
	} else {
		t.Logf("client path catches regcache's selector with passive health off: %v", err)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// catches asserts that a check fails on the frozen client.
func catches(t *testing.T, name string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: the check passes a regcache frozen at its first answers", name)
	} else {
		t.Logf("%s catches the frozen client: %v", name, err)
	}
}

// TestRestart: one short trial of the restart scenario. regcache over
// the etcd module must serve the new instance within the bound, and the
// table must name every client.
func TestRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	b, err := startEtcd(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfg := defaultRestartConfig()
	cfg.Trials, cfg.Outage, cfg.Limit = 1, time.Second, 3*time.Second
	var progress, out bytes.Buffer
	rep, err := runRestart(b, cfg, &progress)
	if err != nil {
		t.Fatal(err)
	}
	writeRestart(&out, rep)
	t.Logf("progress:\n%s\nreport:%s", progress.String(), out.String())
	if rep.Clients[0] != rcModule || rep.Within(0) != 1 {
		t.Errorf("%s: served the new instance %v after its registration; want within %v", rep.Clients[0], rep.Took[0][0], cfg.Bound)
	}
	for _, name := range []string{rcModule, rcPlugin, gmPlugin, gmModule, "What it shows"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("the report does not say %q", name)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"-timeout", "5s", "-services", "50"}, ""},
		{[]string{"-timeout", "0"}, "-timeout must be above 0"},
		{[]string{"-timeout", "2m"}, "-timeout must be above 0"},
		{[]string{"-concurrency", "0"}, "-concurrency must be between"},
		{[]string{"-restart-trials", "0", "-restart-outage", "10s"}, ""},
		{[]string{"-restart-trials", "-1"}, "-restart-trials must be between"},
		{[]string{"-restart-outage", "0"}, "-restart-outage must be above 0"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-figures", "f.json", "-png", ""}, ""},
		{[]string{"-figures", "f.json", "-restart-trials", "3"}, "-figures writes the figures"},
		{[]string{"-figures", "f.json", "-timeout", "5s"}, "-figures writes the figures"},
		{[]string{"-figures", "f.json", "-services", "50"}, "-figures writes the figures"},
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
}

// The figures of a restart report hold its every time, a trial each, a
// time not within the limit as null, and read back as written.
func TestRestartFiguresCarryTheTable(t *testing.T) {
	cfg := defaultRestartConfig()
	cfg.Trials = 2
	rep := &restartReport{
		Config:    cfg,
		Clients:   []string{rcModule, rcPlugin},
		Took:      [][]time.Duration{{160 * time.Millisecond, 7 * time.Microsecond}, {-1, 2772 * time.Millisecond}},
		Registers: []time.Duration{1600 * time.Microsecond, 2300 * time.Microsecond},
	}
	f := restartFigures("cd demo && go run ./etcd -figures x.json", rep, 93*time.Second, 43*time.Second)
	path := filepath.Join(t.TempDir(), "figures.json")
	if err := writeFigures(path, f); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"id": "demo-etcd-restart"`, `"command": "cd demo && go run ./etcd -figures x.json"`,
		`"took": "1m33s"`, `"storm_took": "43s"`, `"outage": "5s"`, `"delay": "500ms"`, `"limit": "5s"`, `"bound": "1.5s"`,
		`"name": "regcache, etcd module",` + "\n" + `          "took": [` + "\n" + `            "160ms",` + "\n" + `            "7µs"`,
		`"took": [` + "\n" + `            null,` + "\n" + `            "2.772s"`,
		`"registers": [` + "\n" + `        "1.6ms",`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the figures lack %q:\n%s", want, raw)
		}
	}
	var back figuresFile
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, f) {
		t.Errorf("read back:\n%+v\nwritten:\n%+v", back, f)
	}
}
