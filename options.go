package cache

import (
	"errors"
	"fmt"
	"time"

	log "go-micro.dev/v4/logger"
	"go-micro.dev/v4/selector"
)

// DefaultTTL is how long a successful lookup stays fresh when no WithTTL
// option is given. It matches go-micro's registry cache.
var DefaultTTL = time.Minute

// Options configures a Cache. The zero value of a field is never used
// directly: New starts from the defaults and applies each Option on top.
type Options struct {
	// Logger receives the cache's log lines. It defaults to go-micro's
	// logger.DefaultLogger. It is left out of JSON.
	Logger log.Logger `json:"-"`

	// TTL is how long data from a successful refresh stays fresh. It must
	// be positive.
	TTL time.Duration `json:"ttl_seconds"`

	// MinimumRetryInterval is the shortest time between two refresh
	// attempts for one service, whatever their outcome. Zero turns the
	// throttle off; it must not be negative.
	MinimumRetryInterval time.Duration `json:"minimum_retry_interval_seconds"`

	// MaximumRetryInterval, set by WithMaximumRetryInterval, caps the adaptive
	// retry interval: each consecutive failed refresh of a service doubles
	// its interval, with jitter, up to this. Zero, or a value equal to MinimumRetryInterval, keeps the fixed
	// interval.
	MaximumRetryInterval time.Duration `json:"maximum_retry_interval_seconds"`

	// RefreshAhead is the fraction of the TTL, at its end, in which a read
	// of fresh data starts a background refresh. Zero turns it off;
	// otherwise fraction × TTL is at least MinimumRetryInterval.
	RefreshAhead float64 `json:"refresh_ahead"`

	// TTLJitter spreads expiries: each is TTL × (1 + u), u uniform in
	// [−TTLJitter, +TTLJitter]. Zero turns it off.
	TTLJitter float64 `json:"ttl_jitter"`

	// MaximumStale is how long after its last successful refresh stale data
	// may still be served. Zero means no limit.
	MaximumStale time.Duration `json:"maximum_stale_seconds"`

	// LastKnownNodes keeps serving a service's last known nodes, as stale
	// data, when the registry or a delete event would leave it with none.
	LastKnownNodes bool `json:"last_known_nodes"`

	// IdleEviction drops an entry that has not been read for this long.
	// Zero means entries with data are never evicted; otherwise it is at
	// least one second.
	IdleEviction time.Duration `json:"idle_eviction_seconds"`

	// Observer is told of state changes, never of single hits. Nil means
	// no observer. It is left out of JSON.
	Observer func(Event) `json:"-"`

	// SnapshotPath is the file the cache loads at New and rewrites when
	// its data changes. Empty means none.
	SnapshotPath string `json:"snapshot_path,omitempty"`

	// ProbeInterval is how often one refresh goes to a registry that the
	// cache holds to be down (refreshes of two services failed in a row);
	// the others are refused locally. Zero turns the registry-wide state
	// off: each service is then retried on its own interval only.
	ProbeInterval time.Duration `json:"probe_interval_seconds"`

	// WatchPerService, set by WithWatchPerService, watches each cached
	// service on its own instead of the whole registry with one stream.
	WatchPerService bool `json:"watch_per_service"`

	// SelectorOptions, set by WithSelectorOptions, are applied by
	// NewSelector to every selector over the cache, before its own. They
	// are left out of JSON.
	SelectorOptions []selector.Option `json:"-"`
}

// Option changes one field of Options.
type Option func(o *Options)

// WithTTL sets how long a successful lookup stays fresh. Validate refuses it, and New panics, if t is
// not positive.
func WithTTL(t time.Duration) Option {
	return func(o *Options) {
		o.TTL = t
	}
}

// WithLogger sets the logger. Validate refuses it, and New panics, if l is nil.
func WithLogger(l log.Logger) Option {
	return func(o *Options) {
		o.Logger = l
	}
}

// WithMinimumRetryInterval sets the shortest time between two refresh
// attempts for one service. Zero turns the throttle off. Validate refuses it, and New panics, if d is
// negative.
func WithMinimumRetryInterval(d time.Duration) Option {
	return func(o *Options) {
		o.MinimumRetryInterval = d
	}
}

// WithMaximumRetryInterval turns on adaptive retry: each consecutive failed
// refresh of a service doubles that service's retry interval, with jitter,
// up to d; a success resets it to MinimumRetryInterval. Use it when a
// registry outage may last long and many services are cached, to shed the
// retry load. Validate refuses it, and New panics, if d is negative or below MinimumRetryInterval.
func WithMaximumRetryInterval(d time.Duration) Option {
	return func(o *Options) {
		o.MaximumRetryInterval = d
	}
}

// WithRefreshAhead makes a read of fresh data in the last fraction of its
// TTL start a background refresh (under singleflight and the throttle), so
// that a service read steadily never turns stale. Use it for hot services
// whose callers should never see data older than the TTL. Validate refuses it, and New panics, if
// fraction is outside [0, 1), and if the minimum retry interval is longer
// than fraction × TTL: the throttle would then keep the window closed for
// longer than it lasts, and a refresh ahead that failed could not be tried
// again before the data expires, so the option would quietly do little or
// nothing.
func WithRefreshAhead(fraction float64) Option {
	return func(o *Options) {
		o.RefreshAhead = fraction
	}
}

// WithTTLJitter spreads each expiry uniformly over TTL × (1 ± fraction), so
// that entries filled together do not expire together (a cache avalanche).
// Validate refuses it, and New panics, if fraction is outside [0, 1), or if TTL × (1 + fraction) is
// longer than the longest time.Duration (about 292 years).
func WithTTLJitter(fraction float64) Option {
	return func(o *Options) {
		o.TTLJitter = fraction
	}
}

// WithMaximumStale stops serving stale data whose last successful refresh is
// older than d: the caller gets an error matching ErrTooStale that names
// the service and the age. Use it when an old address is worse than an
// error. Zero means no limit. Validate refuses it, and New panics, if d is negative.
func WithMaximumStale(d time.Duration) Option {
	return func(o *Options) {
		o.MaximumStale = d
	}
}

// WithLastKnownNodes keeps a service's last known nodes when a registry
// answer or a delete event would leave it with none, and serves them as
// stale (bounded by WithMaximumStale) until the registry shows nodes again. It
// guards against every lease of a healthy service lapsing at once, as in an
// etcd lease storm.
func WithLastKnownNodes() Option {
	return func(o *Options) {
		o.LastKnownNodes = true
	}
}

// WithIdleEviction drops an entry, with its throttle state and its memory,
// once it has not been read for d; later events for it are ignored. Use it
// behind a gateway that looks up many names over time. Zero means never.
//
// Idle entries are looked for every d/4. One second is the floor: below
// it, the search would run more often than a service's data is refreshed
// (every 5 s by default), and an idle cache would spend a core searching.
// Validate refuses it, and New panics, if d is negative, or positive and below one second.
func WithIdleEviction(d time.Duration) Option {
	return func(o *Options) {
		o.IdleEviction = d
	}
}

// WithObserver has f told of the cache's state changes: a service going
// stale, a refresh failing or recovering, throttling starting, the watch
// stream going and coming back, last known nodes kept or released. f runs on
// a goroutine of its own, never on a lookup's; a slow f delays only other
// events (beyond a queue of 256 they are dropped and counted), and a
// panicking f is recovered. Validate refuses it, and New panics, if f is nil.
func WithObserver(f func(Event)) Option {
	return func(o *Options) {
		if f == nil {
			panic("regcache: WithObserver: observer must not be nil")
		}
		o.Observer = f
	}
}

// WithSnapshot keeps the cache's data in a file at path, so that a process
// restarting while the registry is down can still resolve what it knew.
//
// New loads the file as stale data, each service with the age it had. It
// ignores a file written more than a day ago, and skips each
// service whose data is older than that. A time up to five minutes in the
// future (clocks disagree) reads as now; one further ahead is not loaded.
// A missing, truncated, corrupt, foreign or oversized file is logged and
// ignored; so, on Unix, is anything but a regular file, a file that
// another user owns or can write, and a file in a folder that another
// user can write, unless the folder is sticky.
//
// The file is rewritten atomically when the cached data changes, at most
// once per 30 s and once more at Stop, with mode 0600: it holds
// every cached node's address and metadata. A symbolic link at path is
// followed, for reading and for writing, and stays: the file it leads to
// is replaced, so a link into a mounted volume keeps its data there. New
// panics if path is empty.
func WithSnapshot(path string) Option {
	return func(o *Options) {
		if path == "" {
			panic("regcache: WithSnapshot: path must not be empty")
		}
		o.SnapshotPath = path
	}
}

// WithProbeInterval sets how often the cache sends one probe (a real
// refresh that a caller or a resync needs) to a registry it holds to be
// down, and how often it redials the watch stream meanwhile. It bounds
// both the load on a registry that is down, about one call of each per
// interval whatever the number of services, and how long the cache takes
// to notice that it is back. Zero turns the registry-wide state off, and
// the stream's redials then always back off. Validate refuses it, and New panics, if d is negative.
func WithProbeInterval(d time.Duration) Option {
	return func(o *Options) {
		o.ProbeInterval = d
	}
}

// WithWatchPerService watches each cached service on its own
// (registry.WatchService), instead of the whole registry with one stream.
// Use it when the services a client caches see a small share of the
// registry's changes: the one stream receives, decodes and drops every
// change in the registry, while per-service watches receive only the
// cached services' own.
//
// It costs a watch per cached service: a goroutine of the cache's and the
// registry client's own for each, and one watch request per service at
// every reconnect (etcd carries them all on one connection). A watch that
// fails costs only its own service its events: it alone is redialled, and
// its service's data re-validated once it is back. A service's watch opens
// with its first lookup, so a service that registers within a round trip
// of that lookup is found by the retry after the retry interval, not by
// its create event. An evicted service's watch is closed.
func WithWatchPerService() Option {
	return func(o *Options) {
		o.WatchPerService = true
	}
}

// Validate reports whether New accepts opts: nil if it does, otherwise an
// error that names the option and the value, the message New would panic
// with. A service that reads its settings from a file or the environment
// calls it first, to turn a bad value into an error; New never panics on
// options that Validate accepts. docs/options.md lists what each option
// accepts.
func Validate(opts ...Option) error {
	_, err := buildOptions(opts)
	return err
}

// WithSelectorOptions gives every selector over the cache these options
// first: NewSelector applies them before its own, and so does the
// selector that the one-line wiring of the gomicro package makes, which
// has no other way in. Use it to tune passive health there, for example
// gomicro.Registry(reg, cache.WithSelectorOptions(cache.WithEjectAfter(5))).
// Validate and New reject an option that NewSelector would.
func WithSelectorOptions(opts ...selector.Option) Option {
	return func(o *Options) {
		o.SelectorOptions = append(o.SelectorOptions[:len(o.SelectorOptions):len(o.SelectorOptions)], opts...)
	}
}

// newOptions applies opts over the defaults and validates the result once,
// so that the rest of the package can trust every field. It panics with
// Validate's error.
func newOptions(opts []Option) Options {
	o, err := buildOptions(opts)
	if err != nil {
		panic(err.Error())
	}
	return o
}

// buildOptions applies opts over the defaults and checks the result.
func buildOptions(opts []Option) (Options, error) {
	o := Options{
		Logger:               log.DefaultLogger,
		TTL:                  DefaultTTL,
		MinimumRetryInterval: DefaultMinimumRetryInterval,
		ProbeInterval:        DefaultProbeInterval,
	}
	for _, opt := range opts {
		if err := apply(&o, opt); err != nil {
			return Options{}, err
		}
	}
	if err := check(&o); err != nil {
		return Options{}, err
	}
	return o, nil
}

// apply applies one option. An option that panics (WithObserver(nil),
// WithSnapshot(""), or a caller's own) gives an error instead.
func apply(o *Options, opt Option) (err error) {
	if opt == nil {
		return errors.New("regcache: New: nil Option")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	opt(o)
	return nil
}

// check checks the options once applied, and fills MaximumRetryInterval's
// default.
func check(o *Options) error {
	if o.Logger == nil {
		return errors.New("regcache: WithLogger: logger must not be nil")
	}
	if o.TTL <= 0 {
		return fmt.Errorf("regcache: WithTTL: TTL must be positive, got %v", o.TTL)
	}
	if o.MinimumRetryInterval < 0 {
		return fmt.Errorf("regcache: WithMinimumRetryInterval: interval must not be negative, got %v", o.MinimumRetryInterval)
	}
	if o.MaximumRetryInterval < 0 {
		return fmt.Errorf("regcache: WithMaximumRetryInterval: interval must not be negative, got %v",
			o.MaximumRetryInterval)
	}
	if o.MaximumRetryInterval == 0 {
		o.MaximumRetryInterval = o.MinimumRetryInterval
	}
	if o.MaximumRetryInterval < o.MinimumRetryInterval {
		return fmt.Errorf("regcache: WithMaximumRetryInterval: %v is below the minimum retry interval %v",
			o.MaximumRetryInterval, o.MinimumRetryInterval)
	}
	if err := checkFraction("WithRefreshAhead", o.RefreshAhead); err != nil {
		return err
	}
	if err := checkFraction("WithTTLJitter", o.TTLJitter); err != nil {
		return err
	}
	if o.MaximumStale < 0 {
		return fmt.Errorf("regcache: WithMaximumStale: duration must not be negative, got %v", o.MaximumStale)
	}
	if o.ProbeInterval < 0 {
		return fmt.Errorf("regcache: WithProbeInterval: interval must not be negative, got %v", o.ProbeInterval)
	}
	if o.IdleEviction < 0 {
		return fmt.Errorf("regcache: WithIdleEviction: duration must not be negative, got %v", o.IdleEviction)
	}
	if o.IdleEviction > 0 && o.IdleEviction < minIdleEviction {
		return fmt.Errorf("regcache: WithIdleEviction: %v is below the %v floor; use 0 to turn eviction off",
			o.IdleEviction, minIdleEviction)
	}
	if err := checkTTLs(o); err != nil {
		return err
	}
	if _, err := selectorOptions(nil, o.SelectorOptions); err != nil {
		return errors.New("regcache: WithSelectorOptions: " + err.Error())
	}
	return nil
}

// minIdleEviction is the shortest idle time WithIdleEviction accepts.
const minIdleEviction = time.Second

// checkTTLs rejects TTLs whose arithmetic would overflow, and a refresh
// ahead that the throttle would keep from running.
func checkTTLs(o *Options) error {
	// With jitter, expiries are computed as float64(TTL) × (1 + u·jitter),
	// u in [−1, 1). 2^63 itself does not fit in a Duration, hence the
	// strict bound; every product below it converts exactly.
	if top := float64(o.TTL) * (1 + o.TTLJitter); o.TTLJitter > 0 && !(top < 1<<63) {
		return fmt.Errorf("regcache: WithTTL: a TTL of %v with WithTTLJitter(%v) reaches %.3g ns, "+
			"beyond the longest time.Duration (about 292 years); lower the TTL or the jitter",
			o.TTL, o.TTLJitter, top)
	}
	if f := o.RefreshAhead; f > 0 {
		window := time.Duration(f * float64(o.TTL))
		if o.MinimumRetryInterval > window {
			return fmt.Errorf("regcache: WithRefreshAhead: the minimum retry interval %v does not fit in "+
				"the refresh-ahead window %v × TTL %v = %v; raise the fraction or the TTL, "+
				"or lower WithMinimumRetryInterval", o.MinimumRetryInterval, f, o.TTL, window)
		}
	}
	return nil
}

func checkFraction(option string, f float64) error {
	// The negated form also rejects NaN.
	if !(f >= 0 && f < 1) {
		return fmt.Errorf("regcache: %s: fraction must be in [0, 1), got %v", option, f)
	}
	return nil
}
