package integration5

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"testing"
	"time"

	lossless "github.com/regcache/cache/gomicro5/etcd"
	"go-micro.dev/v5/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// newLosslessRegistry is gomicro5/etcd's registry on s: go-micro v5's
// etcd registry with regcache's watcher.
func newLosslessRegistry(s *etcdServer, timeout time.Duration) registry.Registry {
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return lossless.NewRegistry(registry.Addrs(s.Addr()), registry.Timeout(timeout), lossless.LogConfig(&zc))
}

// etcdClient is a client of the test's own, to write keys as another
// process would.
func etcdClient(t *testing.T, s *etcdServer) *clientv3.Client {
	t.Helper()
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Addr()}, DialTimeout: 5 * time.Second, LogConfig: &zc})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// putNodes writes a node key for each id, as go-micro's etcd registry
// does, in one etcd transaction: one revision, one watch response.
func putNodes(t *testing.T, c *clientv3.Client, name string, ids ...string) {
	t.Helper()
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		b, _ := json.Marshal(&registry.Service{Name: name, Version: "1", Nodes: []*registry.Node{{Id: id, Address: "127.0.0.1:9999"}}})
		ops[i] = clientv3.OpPut(path.Join("/micro/registry", name, id), string(b))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatalf("transaction: %v", err)
	}
}

// nextEvent is w.Next, which must return a create of node within 5 s.
func nextEvent(t *testing.T, w registry.Watcher, node string) {
	t.Helper()
	type answer struct {
		res *registry.Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := w.Next()
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Next: %v; want the create of %s", a.err, node)
		}
		if a.res.Action != "create" || len(a.res.Service.Nodes) != 1 || a.res.Service.Nodes[0].Id != node {
			t.Fatalf("Next: %s of %v; want the create of %s", a.res.Action, nodeIDs([]*registry.Service{a.res.Service}), node)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Next has not returned within 5s; want the create of %s", node)
	}
}

// TestLosslessWatcherV5: 20 node keys written in one etcd transaction.
// gomicro5/etcd's watcher yields the 20 creates, in order; go-micro v5's
// own etcd watcher yields the first, then the next write's: the other 19
// reach a cache only at its next refresh.
func TestLosslessWatcherV5(t *testing.T) {
	s := startEtcd(t)
	c := etcdClient(t, s)
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%02d", i)
	}

	w, err := newLosslessRegistry(s, time.Second).Watch()
	if err != nil {
		t.Fatalf("gomicro5/etcd's Watch: %v", err)
	}
	defer w.Stop()
	putNodes(t, c, "batch", ids...)
	for _, id := range ids {
		nextEvent(t, w, id)
	}

	inTree, err := newRegistry(s, time.Second).Watch()
	if err != nil {
		t.Fatalf("go-micro v5's Watch: %v", err)
	}
	defer inTree.Stop()
	putNodes(t, c, "batch2", ids...)
	putNodes(t, c, "after", "sentinel")
	nextEvent(t, inTree, ids[0])
	nextEvent(t, inTree, "sentinel")
}

// TestLosslessWatcherV5Outage: with go-micro v5's gRPC, as with v4's,
// gomicro5/etcd's Next fails at once when etcd stops, where etcd's client
// would wait for it to come back.
func TestLosslessWatcherV5Outage(t *testing.T) {
	s := startEtcd(t)
	w, err := newLosslessRegistry(s, time.Second).Watch()
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Stop()
	failed := make(chan error, 1)
	go func() {
		_, err := w.Next()
		failed <- err
	}()
	start := time.Now()
	go s.Stop()
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("Next: an event, no error")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Next failed %v after etcd's stop began", d)
		}
		t.Logf("Next failed %v after etcd's stop began: %v", time.Since(start), err)
	case <-time.After(5 * time.Second):
		t.Fatal("Next has not failed within 5s of etcd's stop")
	}
}
