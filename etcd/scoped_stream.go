package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// quietAfter is how long a stream may go without a response from etcd
// before the watchdog asks etcd for its revision: the revision that the
// watch of a service held next starts after stays that recent, well
// within what etcd keeps of its history, so that it is seldom compacted.
var quietAfter = 5 * time.Second // a variable for tests

// watchdog fails the stream when etcd has not acknowledged a watch within
// the timeout, whether or not the sender is stuck sending (a connection
// that takes nothing, flow control full), asks etcd again for the watches
// it refused once their retry is due, and asks etcd for its revision
// while the stream is quiet.
func (w *scopedWatcher) watchdog() {
	defer w.wg.Done()
	quiet := quietAfter
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		case <-w.arm:
		}
		now := time.Now()
		w.mu.Lock()
		due, err := w.overdueLocked(now)
		if err != nil {
			end := w.endStream
			w.mu.Unlock()
			// The error first, then the end of the stream (and of a Send
			// stuck on it), whose own error comes after.
			w.deliver(scopedItem{err: err})
			end()
			return
		}
		retried, retry := w.retryRefusedLocked(now)
		ask := !now.Before(w.heard.Add(quiet)) && !now.Before(w.asked.Add(quiet))
		if ask {
			w.asked = now
			w.requests = append(w.requests, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		}
		next := w.heard
		if w.asked.After(next) {
			next = w.asked
		}
		next = next.Add(quiet)
		if !due.IsZero() && due.Before(next) {
			next = due
		}
		if !retry.IsZero() && retry.Before(next) {
			next = retry
		}
		w.mu.Unlock()
		if ask || retried {
			w.wakeSender()
		}
		t.Stop()
		t.Reset(time.Until(next))
	}
}

// overdueLocked returns when the oldest watch etcd has not acknowledged
// is due, or, if it is overdue, the error that ends the stream.
func (w *scopedWatcher) overdueLocked(now time.Time) (due time.Time, err error) {
	// etcd answers every creation asked for, of a watch cancelled since
	// too.
	if len(w.awaiting) == 0 {
		return time.Time{}, nil
	}
	kw := w.awaiting[0]
	due = kw.asked.Add(w.timeout)
	if !now.Before(due) {
		return due, fmt.Errorf("etcd: watch of %s not acknowledged within %v: %w", kw.prefix, w.timeout, errAckTimeout)
	}
	return due, nil
}

// receive reads etcd's responses until the stream ends, and resumes the
// watches on a new stream when it broke but the connection did not.
func (w *scopedWatcher) receive(stream pb.Watch_WatchClient) {
	defer w.wg.Done()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if stream, err = w.resume(err); err != nil {
				w.deliver(scopedItem{err: err})
				return
			}
			continue
		}
		item, revalidate, err := w.received(resp)
		w.flushTold()
		for _, name := range revalidate {
			w.scope.Revalidate(name)
		}
		if err == nil && item.events == nil {
			continue
		}
		if err != nil {
			item = scopedItem{err: err}
		} else {
			item.from.passed()
		}
		if !w.deliver(item) || err != nil {
			return
		}
	}
}

// resumeEvery is the least time between two resumptions: a stream that
// keeps breaking ends the watcher, and the cache above resyncs.
const resumeEvery = 10 * time.Second

// resume replaces a stream that broke, with err, by a new one on which
// each watch resumes at the revision after the last etcd sent of it, as
// etcd's client resumes its watches, so that nothing is lost or repeated
// and the cache need not resync: a GOAWAY, or a member of the cluster
// going away while the connection stays up through the others. It fails,
// and the watcher ends, when the watcher is stopped, when etcd ended the
// stream itself (a member without a leader), when the last resumption was
// less than resumeEvery ago, and when the new stream is not acknowledged
// within grace (the connection's monitor reports an outage meanwhile).
func (w *scopedWatcher) resume(broke error) (pb.Watch_WatchClient, error) {
	if w.ctx.Err() != nil {
		return nil, streamError(w.ctx, broke)
	}
	now := time.Now()
	w.mu.Lock()
	w.endStream()
	recent := !w.resumed.IsZero() && now.Sub(w.resumed) < resumeEvery
	w.mu.Unlock()
	if !resumable(broke) || recent {
		return nil, streamError(w.ctx, broke)
	}
	stream, endStream, err := w.openAcknowledged(nil, grace)
	if err != nil {
		return nil, fmt.Errorf("etcd: watch: %w; resuming it: %w", broke, err)
	}
	w.mu.Lock()
	w.stream, w.endStream, w.resumed = stream, endStream, time.Now()
	// Every watch is asked for again on the new stream, from where it
	// was; what waited to be sent on the old one is in that, but for
	// cancellations, which the old stream's end made. The watches refused
	// wait for their retry, on this stream.
	w.requests = w.requests[:0]
	clear(w.awaiting)
	w.awaiting = w.awaiting[:0]
	w.closing.finishAll()
	for _, kw := range w.byID {
		kw.created, kw.asked = false, time.Now()
		w.awaiting = append(w.awaiting, kw)
		w.requests = append(w.requests, createRequest(kw.id, kw.prefix, kw.next, false))
	}
	w.mu.Unlock()
	w.wakeSender()
	select {
	case w.arm <- struct{}{}:
	default:
	}
	return stream, nil
}

// resumable reports whether a stream that broke with err may be resumed:
// a transport that went away, not an error of etcd's.
func resumable(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && !strings.Contains(st.Message(), rpctypes.ErrNoLeader.Error())
}

// streamError is the error that ended the stream: ctx's cause, if it is
// done, or err.
func streamError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return fmt.Errorf("etcd: the watch ended: %w", cause)
	}
	return fmt.Errorf("etcd: watch: %w", err)
}
