package eject

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	merrors "go-micro.dev/v4/errors"
)

// The pure decisions of passive health: what an outcome says about a node,
// how long an ejection lasts, and whether one more node may be ejected.
// They take the time as an argument; only Health's methods read the
// clock.

// Config is the passive health configuration of a selector. The selector's
// options fill it in and validate it; New and Configure take it as it is.
type Config struct {
	// EjectAfter is the number of failures in a row that ejects a node;
	// 0 turns passive health off.
	EjectAfter int
	// BaseEjection is the first ejection's length, and what each
	// ejection in a row adds, up to MaxEjection.
	BaseEjection, MaxEjection time.Duration
	// MaxEjectedPercent is the share of a service's listed nodes that may
	// be ejected at once; one node always may.
	MaxEjectedPercent int
	// LimboShare is the share of a service's nodes whose loss at once
	// is a mass loss (limbo.go); 0 turns limbo off.
	LimboShare float64
	// LimboBound is the longest a node stays in limbo; 0 is a minute.
	LimboBound time.Duration
}

// Validate names the first invalid value of c, if any, by the option that
// sets it.
func (c Config) Validate() error {
	switch {
	case c.EjectAfter < 0:
		return fmt.Errorf("WithEjectAfter: %d failures is negative", c.EjectAfter)
	case c.BaseEjection <= 0:
		return fmt.Errorf("WithEjectionTime: base %v is not positive", c.BaseEjection)
	case c.MaxEjection < c.BaseEjection:
		return fmt.Errorf("WithEjectionTime: max %v is below the base %v", c.MaxEjection, c.BaseEjection)
	case c.MaxEjectedPercent < 0 || c.MaxEjectedPercent > 100:
		return fmt.Errorf("WithMaximumEjectedPercent: %d is outside [0, 100]", c.MaxEjectedPercent)
	case !(c.LimboShare >= 0 && c.LimboShare <= 1): // NaN too
		return fmt.Errorf("WithLimbo: share %v is outside [0, 1]", c.LimboShare)
	case c.LimboBound < 0:
		return fmt.Errorf("WithLimbo: bound %v is negative", c.LimboBound)
	}
	return nil
}

// off reports whether passive health is turned off.
func (c *Config) off() bool { return c.EjectAfter == 0 }

// limboOff reports whether limbo is off: turned off, or passive health
// is, without which a node in limbo could not be dropped on failure.
func (c *Config) limboOff() bool { return c.off() || c.LimboShare == 0 }

// limboBound is how long a node stays in limbo at most.
func (c *Config) limboBound() time.Duration {
	if c.LimboBound > 0 {
		return c.LimboBound
	}
	return time.Minute
}

// outcome is what the error of one attempt says about the node it went to.
type outcome int

const (
	// reached: the node answered, successfully or with its handler's
	// error.
	reached outcome = iota
	// unreachable: the client could not reach the node, or the attempt
	// timed out.
	unreachable
	// absent: the client could not connect because the node's host
	// refused the connection: nothing listens at its address. One such
	// failure ejects the node.
	absent
	// unrelated: the client failed before or apart from the node (it
	// could not encode the request, for example); the attempt says
	// nothing about the node.
	unrelated
)

// The error Ids of go-micro's client (client/rpc_client.go, rpc_codec.go).
const (
	clientID          = "go.micro.client"
	clientTransportID = "go.micro.client.transport"
	clientIDPrefix    = "go.micro.client."
)

// classify tells what err, passed by go-micro's client to Mark after one
// attempt, says about the node.
//
// go-micro v4.11.0's client builds a *errors.Error with Id
// "go.micro.client" when it cannot open a connection (code 500, detail
// "connection error: ...") and when the attempt times out (code 408), and
// one with Id "go.micro.client.transport" when the connection breaks while
// the request or the answer is on it. Those count against the node; a
// connection refused (detail "connection error: dial tcp ...: connect:
// connection refused") is the node's absence, not a hiccup.
//
// An error from the service's handler travels as text and reaches Mark as
// the client's own string type, never as a *errors.Error, even when the
// handler passes on a "go.micro.client" error of a call it made itself: it
// is an answer, and the node was reached. So are the service's own error
// Ids and plain errors. The client's other errors ("go.micro.client" with
// another code or detail, "go.micro.client.codec") are about the request,
// not the node.
func classify(err error) outcome {
	if err == nil {
		return reached
	}
	e := clientError(err)
	if e == nil {
		return reached
	}
	switch {
	case e.Id == clientID:
		switch {
		case dialFailed(e) && refusedText(e.Detail):
			return absent
		case e.Code == 408 || dialFailed(e):
			return unreachable
		}
		return unrelated
	case e.Id == clientTransportID:
		return unreachable
	case strings.HasPrefix(e.Id, clientIDPrefix):
		return unrelated
	}
	return reached
}

// Unsent reports whether err, of one attempt of go-micro's client, says
// that the client could not open a connection to the node: the request
// was never written, so no server received it.
func Unsent(err error) bool {
	e := clientError(err)
	return e != nil && e.Id == clientID && dialFailed(e)
}

// dialFailed reports whether e, with the client's Id, is its error for a
// connection it could not open. go-micro's client formats the dial's
// error into the detail, so its text is all there is to read.
func dialFailed(e *merrors.Error) bool {
	return e.Code == 500 && strings.HasPrefix(e.Detail, "connection error")
}

// refusedText reports whether detail ends with a refused connection's
// text: ECONNREFUSED's on Unix ("connection refused"), or WSAECONNREFUSED's
// on Windows ("... the target machine actively refused it.").
func refusedText(detail string) bool {
	return strings.HasSuffix(detail, "connection refused") || strings.HasSuffix(detail, "actively refused it.")
}

// clientError returns the first *errors.Error in err's tree, depth first
// as errors.As walks it, or nil. It walks the tree by hand: errors.As
// would move its target to the heap on every call, and a handler's error
// (the client's own string type) would allocate at every Mark. A call
// wrapper may join errors (errors.Join, fmt.Errorf with several %w), so
// multiple wrapping is followed too.
func clientError(err error) *merrors.Error {
	for err != nil {
		switch x := err.(type) {
		case *merrors.Error:
			if x != nil {
				return x
			}
			return nil
		case interface{ Unwrap() []error }:
			for _, inner := range x.Unwrap() {
				if e := clientError(inner); e != nil {
					return e
				}
			}
			return nil
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// ejectionTime is the length of the n-th ejection in a row: base × n, at
// most max.
func ejectionTime(c *Config, n int) time.Duration {
	if n > maxStreak(c) {
		return c.MaxEjection
	}
	return min(c.BaseEjection*time.Duration(n), c.MaxEjection)
}

// maxStreak is the count of ejections in a row past which an ejection no
// longer grows. The count is kept at most one above it, so that it decays
// in bounded time.
func maxStreak(c *Config) int {
	return int((c.MaxEjection + c.BaseEjection - 1) / c.BaseEjection)
}

// decayed is a count of ejections in a row, n, after the node has been back
// in rotation since end: one less per base period from end on.
func decayed(c *Config, n int, end, now time.Time) int {
	if n == 0 || !now.After(end) {
		return n
	}
	return max(0, n-int(now.Sub(end)/c.BaseEjection))
}

// mayEject reports whether one more node of a service may be ejected while
// ejected of its nodes are: always the first, and otherwise as long as the
// share stays within the maximum.
func mayEject(c *Config, ejected, nodes int) bool {
	return ejected < maxEjected(c, nodes)
}

// maxEjected is how many of a service's nodes may be ejected at once: the
// maximum share of them, and always one.
func maxEjected(c *Config, nodes int) int {
	return max(1, c.MaxEjectedPercent*nodes/100)
}

// maxReason caps the error text kept as the reason of an ejection.
const maxReason = 256

// capReason returns the text of err, cut at maxReason bytes on a rune
// boundary: the error may quote a response of any size.
func capReason(err error) string {
	s := err.Error()
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
