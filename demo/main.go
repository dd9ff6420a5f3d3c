// Command demo shows in one run why regcache exists. It runs the same
// storm simulation against four clients of go-micro's in-memory registry:
// no cache, go-micro v4's registry/cache, go-micro v5's (over the v4
// registry through an adapter) and regcache, with latency and faults
// injected around the registry. The scenarios are a cold-start storm, a
// rolling deployment (every instance replaced, and every entry expiring at
// once while the registry is slow), the restart of a single-instance
// service, a 10 s registry outage with a warm and a cold cache, and the
// recovery. Then the client path: go-micro RPCs to a service of 3
// instances, one of them killed during a registry outage, through
// go-micro's default selector and regcache's. It needs no setup, and its
// only network traffic is those RPCs, on loopback. The report goes to
// stdout, and its counts, second by second, to a picture (-png).
//
// `go run ./etcd` runs the same scenarios against an embedded etcd.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go-micro.dev/v4/logger"

	"github.com/regcache/cache/demo/internal/storm"
)

func main() {
	cfg, opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2) // parseFlags has said why
	}
	// go-micro's cache logs every failed refresh; keep the tables readable.
	logger.DefaultLogger = logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))

	if opts.phases {
		storm.WritePhases(os.Stdout, runPhases(cfg))
		return
	}
	start := time.Now()
	rep, err := storm.Run(cfg, storm.NewMemory(), os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		fail(err)
	}
	took := time.Since(start)
	storm.Write(os.Stdout, rep)
	if opts.png != "" {
		if err := storm.SavePicture(opts.png, rep); err != nil {
			fail(err)
		}
		fmt.Fprintln(os.Stderr, "demo: the picture of these counts is in", absolute(opts.png))
	}
	if opts.figures != "" {
		// The same run's figures, and the -phases runs', for the
		// documents: one source for every figure they show.
		fmt.Println()
		start := time.Now()
		ph := runPhases(cfg)
		storm.WritePhases(os.Stdout, ph)
		command := "cd demo && go run . " + strings.Join(os.Args[1:], " ")
		if err := writeFigures(opts.figures, storm.NewFigures(command, rep, took, ph, time.Since(start))); err != nil {
			fail(err)
		}
		fmt.Fprintln(os.Stderr, "demo: the figures of these runs are in", absolute(opts.figures))
	}
}

// runPhases runs the recovery at each of storm.PhaseEnds.
func runPhases(cfg storm.Config) *storm.Phases {
	ph, err := storm.RunPhases(cfg, storm.PhaseEnds, func() (storm.Backend, error) { return storm.NewMemory(), nil }, os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		fail(err)
	}
	return ph
}

// writeFigures writes f to path, through a temporary file, so that a run
// that fails leaves the old figures whole.
func writeFigures(path string, f *storm.Figures) error {
	var b bytes.Buffer
	if err := storm.WriteFigures(&b, f); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "demo:", err)
	os.Exit(1)
}

func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// options are the demo's own flags, beside the simulation's.
type options struct {
	png     string // where the picture goes; "" for none
	phases  bool   // run the recovery at several ends of the outage instead
	figures string // where the figures of a run and a -phases run go; "" for none
}

// defaultPicture is where the picture goes: next to the report, in the
// directory the demo runs in (demo/ under `make demo`).
const defaultPicture = "regcache-demo.png"

// parseFlags parses and validates the command line, and tells stderr what
// is wrong with it, naming the flag.
func parseFlags(args []string, stderr io.Writer) (storm.Config, options, error) {
	cfg := storm.DefaultConfig()
	opts := options{png: defaultPicture}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	fs.StringVar(&opts.png, "png", opts.png, "where to write the picture of the run's counts, a PNG (\"\": none)")
	fs.BoolVar(&opts.phases, "phases", false, "run only the cold start, the outage and the recovery, once for each end of the outage at 0, 0.25, 0.5 and 0.75 of the retry interval after its 10 units, and print a table of the caches side by side (about 100 s)")
	fs.StringVar(&opts.figures, "figures", "", "after the run, run -phases too, and write the figures of both to this JSON file, the source of the documents' figures (`make figures`; every simulation flag at its default)")
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err // the flag package has printed it, with the usage
	}
	err := cfg.Validate()
	switch {
	case err != nil:
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case opts.figures != "" && opts.phases:
		err = errors.New("-figures runs the -phases runs itself; give one of the two")
	case opts.figures != "" && !atDefaults(cfg):
		err = errors.New("-figures writes the figures that the documents show, which are of the defaults: leave the simulation's flags at their defaults")
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v (see -h)\n", err)
	}
	return cfg, opts, err
}

// atDefaults says whether every flag of the simulation is at its default.
func atDefaults(cfg storm.Config) bool {
	d := storm.DefaultConfig()
	return cfg.Duration == d.Duration && cfg.Concurrency == d.Concurrency && cfg.Services == d.Services &&
		cfg.Latency == d.Latency && cfg.Slow == d.Slow && cfg.Capacity == d.Capacity &&
		cfg.RPCRate == d.RPCRate && cfg.OutageEnd == d.OutageEnd
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
