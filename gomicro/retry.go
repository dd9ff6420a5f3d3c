package gomicro

import (
	"context"
	"reflect"

	"go-micro.dev/v4/client"

	"github.com/regcache/cache/internal/eject"
)

// retryUnsent returns the retry policy that Registry gives the client: the
// first attempt of a call that could not open a connection (refused, no
// route, the dial timed out) is retried, since its request was never
// written and no server received it; every other outcome is left to
// fallback, the policy the client had, go-micro's by default. The retry
// takes a node from the call's Next again, after the client's Mark: a node
// whose host refused the connection is ejected by then, so the retry goes
// to another node.
//
// Only the first attempt is retried that way, so that a service whose
// nodes all refuse fails at once, after one retry, instead of waiting
// through every backoff of the client's retries.
func retryUnsent(fallback client.RetryFunc) client.RetryFunc {
	return func(ctx context.Context, req client.Request, n int, err error) (bool, error) {
		if n == 0 && eject.Unsent(err) {
			return true, nil
		}
		if fallback == nil {
			return false, nil
		}
		return fallback(ctx, req, n, err)
	}
}

// unsentCode is the code of retryUnsent's policies: every closure of one
// function literal shares it, whatever it captured.
var unsentCode = reflect.ValueOf(retryUnsent(nil)).Pointer()

// installRetry gives c the retry policy of retryUnsent over the one it
// has, unless that is one already.
func installRetry(c client.Client) {
	cur := c.Options().CallOptions.Retry
	if cur != nil && reflect.ValueOf(cur).Pointer() == unsentCode {
		return
	}
	_ = c.Init(client.Retry(retryUnsent(cur)))
}
