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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
		ph, err := storm.RunPhases(cfg, storm.PhaseEnds, func() (storm.Backend, error) { return storm.NewMemory(), nil }, os.Stderr, isTerminal(os.Stderr))
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		storm.WritePhases(os.Stdout, ph)
		return
	}
	rep, err := storm.Run(cfg, storm.NewMemory(), os.Stderr, isTerminal(os.Stderr))
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	storm.Write(os.Stdout, rep)
	if opts.png != "" {
		if err := storm.SavePicture(opts.png, rep); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		if abs, err := filepath.Abs(opts.png); err == nil {
			opts.png = abs
		}
		fmt.Fprintln(os.Stderr, "demo: the picture of these counts is in", opts.png)
	}
}

// options are the demo's own flags, beside the simulation's.
type options struct {
	png    string // where the picture goes; "" for none
	phases bool   // run the recovery at several ends of the outage instead
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
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err // the flag package has printed it, with the usage
	}
	err := cfg.Validate()
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v (see -h)\n", err)
	}
	return cfg, opts, err
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
