package main

import (
	"bytes"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go-micro.dev/v5/logger"

	"github.com/regcache/cache/demo5/internal/storm"
)

// Every scenario at a tenth of the default timeline, against go-micro v5:
// the report names v5's packages, and regcache keeps up with the rolling
// deployment and the restart, where a regcache frozen at its first answers
// fails both checks.
func TestShortTimeline(t *testing.T) {
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	cfg, _, err := parseFlags([]string{"-duration=4200ms", "-concurrency=8", "-services=5", "-rpc-rate=100",
		"-latency=1ms", "-slow=100ms", "-capacity=4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clients = storm.DefaultClients()
	for _, c := range cfg.Clients {
		if c.Name == storm.RegCache {
			cfg.Clients = append(cfg.Clients, storm.Frozen(c))
		}
	}
	var progress, out bytes.Buffer
	rep, err := storm.Run(cfg, storm.NewMemory(), &progress, false)
	if err != nil {
		t.Fatal(err)
	}
	storm.Write(&out, rep)
	t.Logf("report:\n%s", out.String())

	for _, want := range []string{"go-micro.dev/v5/registry/cache", "github.com/regcache/cache/gomicro5",
		"Cold-start storm", "Registry outage", "Recovery", "What the numbers say"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	const slack = 100 * time.Millisecond
	warm, frozen := storm.Key{Client: storm.RegCache}, storm.Key{Client: "frozen " + storm.RegCache}
	if err := storm.CheckRolling(rep, warm, slack); err != nil {
		t.Error(err)
	}
	if err := storm.CheckRestart(rep, warm, slack); err != nil {
		t.Error(err)
	}
	if _, ok := rep.Row(storm.RollingDeploy, frozen); !ok {
		t.Fatal("no row for the frozen regcache")
	}
	if storm.CheckRolling(rep, frozen, slack) == nil || storm.CheckRestart(rep, frozen, slack) == nil {
		t.Error("a check passes a regcache frozen at its first answers")
	}
	if r, ok := rep.Row(storm.Outage, warm); !ok || r.Lookups == 0 || r.Failed != 0 {
		t.Errorf("outage: regcache, warm: %+v; want lookups and no failure", r)
	}
	// Client path, through go-micro v5's RPC client: every RPC through
	// regcache's selector succeeds, and the dead node gets almost none of
	// its attempts.
	if err := storm.CheckClientPath(rep, storm.RegCacheSelector, 0.02); err != nil {
		t.Error(err)
	}

	// The picture draws the tables' counts, slot by slot, and is written
	// as a PNG that decodes.
	if err := storm.CheckPicture(rep); err != nil {
		t.Error(err)
	}
	path := filepath.Join(t.TempDir(), defaultPicture)
	if err := storm.SavePicture(path, rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the picture does not decode: %v", err)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	var stderr bytes.Buffer
	if _, _, err := parseFlags([]string{"-services=0"}, &stderr); err == nil {
		t.Error("-services=0 accepted")
	}
	if _, _, err := parseFlags([]string{"extra"}, &stderr); err == nil {
		t.Error("an argument accepted")
	}
	if !strings.Contains(stderr.String(), "unexpected argument") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
