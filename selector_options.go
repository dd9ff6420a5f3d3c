package cache

import (
	"context"
	"time"

	"go-micro.dev/v4/selector"

	"github.com/regcache/cache/internal/eject"
)

// The defaults of passive health. docs/client.md compares them with
// Envoy's and gRPC's outlier detection.
const (
	// defaultEjectAfter is the number of failures in a row that ejects a
	// node. Only failures to reach the node count, never a handler's
	// answer, so three is already strong evidence; go-micro v1's
	// blacklist used three as well, Envoy five for any 5xx.
	defaultEjectAfter = 3
	// defaultBaseEjection is the first ejection's length, as in Envoy and
	// gRPC. Each ejection in a row adds as much again.
	defaultBaseEjection = 30 * time.Second
	// defaultMaxEjection caps an ejection. Envoy and gRPC cap at 5 min,
	// but a readmitted node here is ejected again by its first failure,
	// so a readmission costs one failed attempt and can come sooner.
	defaultMaxEjection = 2 * time.Minute
	// defaultMaxEjectedPercent is the share of a service's nodes that may
	// be ejected at once; one node always may. It is Envoy's panic
	// threshold, where Envoy stops honouring health altogether.
	defaultMaxEjectedPercent = 50
	// defaultLimboShare is the share of a service's nodes whose loss at
	// once puts them in limbo: more than half. A rolling deployment
	// replaces one node at a time and a scale-down rarely halves a
	// service at once; a registry that lost leases loses them all.
	defaultLimboShare = 0.5
)

// defaultHealth is the passive health configuration of a selector given
// no health option.
var defaultHealth = eject.Config{
	EjectAfter:        defaultEjectAfter,
	BaseEjection:      defaultBaseEjection,
	MaxEjection:       defaultMaxEjection,
	MaxEjectedPercent: defaultMaxEjectedPercent,
	LimboShare:        defaultLimboShare,
}

// healthKey keys the passive health configuration in
// selector.Options.Context, where it travels as go-micro's selectors carry
// their own options, so that both NewSelector and Init accept it.
type healthKey struct{}

// healthOf returns the configuration that the options o carry: the
// defaults changed by every health option applied to o.
func healthOf(o *selector.Options) eject.Config {
	if o.Context != nil {
		if c, ok := o.Context.Value(healthKey{}).(eject.Config); ok {
			return c
		}
	}
	return defaultHealth
}

// withHealth returns an option that changes the configuration in the
// options with change.
func withHealth(change func(*eject.Config)) selector.Option {
	return func(o *selector.Options) {
		c := healthOf(o)
		change(&c)
		ctx := o.Context
		if ctx == nil {
			ctx = context.Background()
		}
		o.Context = context.WithValue(ctx, healthKey{}, c)
	}
}

// WithEjectAfter sets how many attempts in a row must fail to reach a node
// before NewSelector's passive health ejects it (default 3). A failure to
// reach a node is what go-micro's client reports to Mark for a connection
// it could not open or that broke, and for an attempt that timed out; an
// error from the service's handler is an answer, and resets the count. A
// connection refused ejects the node at once, whatever n: nothing listens
// at its address.
//
// n = 0 turns passive health off: Mark does nothing, as in go-micro's
// default selector. A negative n makes NewSelector panic and Init fail.
func WithEjectAfter(n int) selector.Option {
	return withHealth(func(c *eject.Config) { c.EjectAfter = n })
}

// WithEjectionTime sets how long an ejection lasts: base the first time
// (default 30 s), and base more for each ejection in a row, up to max
// (default 2 min). A node that stays reachable after its readmission has
// its count of ejections in a row lowered by one per base period.
//
// base must be positive and max at least base; otherwise NewSelector
// panics and Init fails.
func WithEjectionTime(base, max time.Duration) selector.Option {
	return withHealth(func(c *eject.Config) { c.BaseEjection, c.MaxEjection = base, max })
}

// WithMaximumEjectedPercent sets the largest share of a service's nodes, in
// percent, that may be ejected at the same time (default 50). One node may
// always be ejected, whatever the size of the service; a node that fails
// while the share is reached stays in rotation. p = 0 therefore ejects at
// most one node per service, and p = 100 any number; when every node a
// caller may pick is ejected, Select and Next ignore the ejections.
//
// p outside [0, 100] makes NewSelector panic and Init fail.
func WithMaximumEjectedPercent(p int) selector.Option {
	return withHealth(func(c *eject.Config) { c.MaxEjectedPercent = p })
}

// WithLimbo sets when the nodes a registry drops stay in rotation. When
// the node list a Select meets has lost more than share of a service's
// nodes within a second (default 0.5: more than half), or its last node,
// or when 3 or more services lose nodes within a second, the nodes lost
// enter limbo instead of leaving: Select keeps handing them out, even
// when the cache answers that the service is not found, one attempt at a
// time until one reaches the node. A node leaves limbo when it is listed
// again, at its first failure to be reached, or when bound has passed
// (0, the default: the TTL of regcache's cache, or a minute for a Cache
// of another kind). The registry's confirmation of the loss does not end
// it. The cache's own answers (GetService, Lookup) are not changed.
//
// share = 0 turns limbo off, as does turning passive health off. A share
// outside [0, 1] or a negative bound makes NewSelector panic and Init
// fail.
func WithLimbo(share float64, bound time.Duration) selector.Option {
	return withHealth(func(c *eject.Config) { c.LimboShare, c.LimboBound = share, bound })
}
