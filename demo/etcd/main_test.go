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

// A short run against a real embedded etcd: etcd is stopped for the
// outage and restarted for the recovery.
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
		Duration:    6 * time.Second,
		Concurrency: 8,
		Services:    5,
		Latency:     time.Millisecond,
		Slow:        100 * time.Millisecond,
		Capacity:    4,
	}
	var progress bytes.Buffer
	rep, err := storm.Run(cfg, b, &progress, false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	storm.Write(&out, rep)
	t.Logf("progress:\n%s\nreport:\n%s", progress.String(), out.String())

	rc, ok := rep.Row(storm.Outage, storm.Key{Client: storm.RegCache})
	if !ok || rc.Lookups == 0 {
		t.Fatalf("no regcache lookups in the outage")
	}
	if rc.Failed != 0 {
		t.Errorf("outage: regcache failed %d of %d lookups while it held stale data", rc.Failed, rc.Lookups)
	}
	outage := rep.Scenarios[storm.Outage].End - rep.Scenarios[storm.Outage].Start
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
		{[]string{"extra"}, `unexpected argument "extra"`},
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
