// Command demo5 is the demo (see demo/) against go-micro v5: `make demo
// DEMOFLAGS=-v5` at the repository's root, or `go run .` here. It runs the
// same scenarios with the same flags, and its three clients are go-micro
// v5's in-memory registry itself, go-micro.dev/v5/registry/cache (of the
// go-micro v5 in go.mod, v5.30.0) and regcache's flavour for go-micro v5,
// github.com/regcache/cache/gomicro5.
// Its internal/storm is generated from the demo's (`make gen` at the
// repository's root); this file is its own.
//
// It is a module of its own, apart from demo/, because go-micro v4's and
// v5's RPC packages cannot share a binary: both errors packages register
// the protobuf file "errors.proto", and the second registration panics.
// (The v4 demo links v5's registry/cache alone, which imports neither.)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go-micro.dev/v5/logger"

	"github.com/regcache/cache/demo5/internal/storm"
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
			fmt.Fprintln(os.Stderr, "demo5:", err)
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
// directory the demo runs in (demo5/ under `make demo DEMOFLAGS=-v5`).
const defaultPicture = "regcache-demo.png"

// parseFlags parses and validates the command line, the demo's flags and
// -png, and tells stderr what is wrong with it.
func parseFlags(args []string, stderr io.Writer) (storm.Config, options, error) {
	cfg := storm.DefaultConfig()
	opts := options{png: defaultPicture}
	fs := flag.NewFlagSet("demo5", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.Flags(fs)
	fs.StringVar(&opts.png, "png", opts.png, "where to write the picture of the run's counts, a PNG (\"\": none)")
	fs.BoolVar(&opts.phases, "phases", false, "run only the cold start, the outage and the recovery, once for each end of the outage at 0, 0.25, 0.5 and 0.75 of the retry interval after its 10 units, and print a table of the caches side by side (about 100 s)")
	if err := fs.Parse(args); err != nil {
		return cfg, opts, err
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
