package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go-micro.dev/v4/logger"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/connectivity"
)

// logLines is a go-micro logger that keeps what it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Init(...logger.Option) error                 { return nil }
func (l *logLines) Options() logger.Options                     { return logger.Options{Level: logger.InfoLevel} }
func (l *logLines) Fields(map[string]interface{}) logger.Logger { return l }
func (l *logLines) String() string                              { return "lines" }
func (l *logLines) Log(_ logger.Level, v ...interface{})        { l.add(fmt.Sprint(v...)) }
func (l *logLines) Logf(_ logger.Level, format string, v ...interface{}) {
	l.add(fmt.Sprintf(format, v...))
}

func (l *logLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *logLines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func refusal(rev int64, reason string) fakeRecv {
	return fakeRecv{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: rev}, WatchId: progressID,
		Created: true, Canceled: true, CancelReason: reason}}
}

// etcd refuses a watch (under auth, a role that may not read its keys) with
// WatchId -1, the id of its answer to a progress request, and the
// revision it is at. The refusal is the answer to the first creation
// awaiting one: it is logged at once with etcd's reason, it moves the
// resume point of no other watch (a watch still catching up would resume
// past events it never delivered), the stream goes on, and the watch is
// asked for again on a backoff. A progress answer still moves the resume
// points.
func TestARefusalMovesNoResumePoint(t *testing.T) {
	checkNoWatcherLeft(t)
	c, scope := memoryScope(t)
	streams := make(chan *fakeStream, 1)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		s.resps <- created(sentinelID, 10)
		streams <- s
		return s, nil
	}
	log := &logLines{}
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), time.Hour, log)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	stream := <-streams
	stream.request(t) // the sentinel
	stream.request(t) // anchor's, from 11
	stream.resps <- created(2, 10)
	c.GetService("secret")
	if r := stream.request(t).GetCreateRequest(); r == nil || string(r.Key) != watchPrefix("secret") || r.WatchId != 3 {
		t.Fatalf("request %v; want secret's watch, 3", r)
	}
	stream.resps <- refusal(50, "etcdserver: permission denied")
	eventually(t, "the refusal logged", func() bool {
		return strings.Contains(log.text(), "/micro/registry/secret/") && strings.Contains(log.text(), "permission denied")
	})
	if _, _, next := w.watchOf("anchor"); next != 11 {
		t.Errorf("anchor's watch resumes from %d after the refusal; want 11, where it was", next)
	}
	// Asked for again (the first retry is within 100 ms), and created.
	r := stream.request(t).GetCreateRequest()
	if r == nil || string(r.Key) != watchPrefix("secret") || r.StartRevision != 51 {
		t.Fatalf("request %v; want secret's watch again, from 51", r)
	}
	stream.resps <- created(r.WatchId, 52)
	eventually(t, "secret's watch created", func() bool { _, created, _ := w.watchOf("secret"); return created })

	stream.resps <- fakeRecv{resp: &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 60}, WatchId: progressID}}
	eventually(t, "anchor's resume point moved by progress", func() bool { _, _, next := w.watchOf("anchor"); return next == 61 })
	select {
	case it := <-w.items:
		t.Fatalf("the stream passed %v, %v; want nothing: a refusal ends no stream", it.events, it.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// etcd's gRPC proxy, and etcd before 3.4, number the watches themselves:
// the sentinel's answer tells, and the scoped stream does not open.
func TestAnEtcdThatNumbersWatchesItselfIsTold(t *testing.T) {
	checkNoWatcherLeft(t)
	_, scope := memoryScope(t)
	open := func(ctx context.Context) (pb.Watch_WatchClient, error) {
		s := newFakeStream(ctx)
		s.resps <- created(0, 10)
		return s, nil
	}
	w, err := newScopedWatcherOn(open, newFakeConn(connectivity.Ready), scope, context.Background(), time.Second, nil)
	if !errors.Is(err, errNoClientIDs) {
		if w != nil {
			w.Stop()
		}
		t.Fatalf("newScopedWatcherOn: %v; want errNoClientIDs", err)
	}
}
