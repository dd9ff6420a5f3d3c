// Package guard makes the calls the cache makes to the registry it wraps,
// each turning a panic into an error: a registry plugin's bug must never
// take down the process that caches it.
package guard

import (
	"context"
	"errors"
	"fmt"

	"go-micro.dev/v4/registry"
)

// GetService asks r for name once, with ctx (nil for none).
func GetService(r registry.Registry, name string, ctx context.Context) (svcs []*registry.Service, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("registry %s panicked: %v", Name{r}, p)
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	return r.GetService(name, registry.GetContext(ctx))
}

// ListServices asks r for every service, with ctx.
func ListServices(r registry.Registry, ctx context.Context) (svcs []*registry.Service, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("registry %s panicked in ListServices: %v", Name{r}, p)
		}
	}()
	return r.ListServices(registry.ListContext(ctx))
}

// Watch calls r's Watch with opts and ctx. A nil watcher is an error too.
func Watch(r registry.Registry, ctx context.Context, opts ...registry.WatchOption) (w registry.Watcher, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("registry %s panicked in Watch: %v", Name{r}, p)
		}
	}()
	w, err = r.Watch(append(opts, registry.WatchContext(ctx))...)
	if err == nil && w == nil {
		err = errors.New("registry returned a nil watcher")
	}
	return w, err
}

// MaxEmptyNexts is how many results in a row with neither an event nor an
// error end a stream.
const MaxEmptyNexts = 64

// Next returns w's next result, r being its registry. maxEmptyNexts results
// in a row with neither an event nor an error are an error: a watcher that
// would spin without blocking is reconnected with backoff rather than left
// to burn a core. empty counts those results.
func Next(r registry.Registry, w registry.Watcher, empty *int) (res *registry.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("registry %s panicked in Next: %v", Name{r}, p)
		}
	}()
	res, err = w.Next()
	if err != nil || res != nil {
		*empty = 0
		return res, err
	}
	if *empty++; *empty == MaxEmptyNexts {
		return nil, errors.New("watcher keeps returning neither an event nor an error")
	}
	return nil, nil
}

// Stop stops a watcher; a panic in it is recovered.
func Stop(w registry.Watcher) {
	defer func() { _ = recover() }()
	w.Stop()
}

// Name formats as the registry's String when a log line is written, so
// that a line made under a lock calls nothing of the registry's there. A
// panic in String gives "?".
type Name struct{ R registry.Registry }

func (n Name) String() (name string) {
	defer func() {
		if recover() != nil {
			name = "?"
		}
	}()
	return n.R.String()
}
