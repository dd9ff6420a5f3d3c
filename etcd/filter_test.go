package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/regcache/cache/watchscope"
	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// realistic is a service as a go-micro server registers it: a node with
// the server's metadata, and endpoints with their request and response
// types (about 1 KB of JSON).
func realistic(name string) *registry.Service {
	value := func(n string, fields ...string) *registry.Value {
		v := &registry.Value{Name: n, Type: n}
		for _, f := range fields {
			v.Values = append(v.Values, &registry.Value{Name: f, Type: "string"})
		}
		return v
	}
	return &registry.Service{
		Name:    name,
		Version: "latest",
		Nodes: []*registry.Node{{
			Id:      name + "-0d4c6a1e-8f6b-4f5e-9a63-2f1b5c7d9e01",
			Address: "10.0.12.34:41235",
			Metadata: map[string]string{
				"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http",
			},
		}},
		Endpoints: []*registry.Endpoint{
			{Name: "Handler.Call", Request: value("CallRequest", "name", "id"), Response: value("CallResponse", "msg"),
				Metadata: map[string]string{"endpoint": "Handler.Call"}},
			{Name: "Handler.List", Request: value("ListRequest", "page", "limit", "filter"), Response: value("ListResponse", "items", "next"),
				Metadata: map[string]string{"endpoint": "Handler.List"}},
		},
	}
}

// TestServiceName: the name read from a value's JSON without decoding it
// is the one decoding gives, or none ("?": it cannot tell at that cost,
// and the value is decoded).
func TestServiceName(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{encode(realistic("greeter")), "greeter"},
		{encode(realistic("team/api-v2.x")), "team/api-v2.x"},
		{encode(&registry.Service{}), ""},
		{`{}`, ""},
		{` { "version" : "1" , "name" : "spaced" } `, "spaced"},
		{"{\n\t\"name\":\r\"ws\"}", "ws"},
		// encoding/json matches keys in any case, and the last wins.
		{`{"Name":"upper"}`, "upper"},
		{`{"NAME":"a","name":"b"}`, "b"},
		{`{"name":"a","nAmE":"b","version":"1"}`, "b"},
		// Names elsewhere than at the top are not the service's.
		{`{"endpoints":[{"name":"e","request":{"name":"r","values":[{"name":"v"}]}}],"name":"top"}`, "top"},
		{`{"metadata":{"name":"m"},"name":"top"}`, "top"},
		{`{"nodes":[{"id":"n","metadata":{"name":"x"}}]}`, ""},
		{`{"version":"a \"name\": \"q\" \\","name":"top"}`, "top"},
		{`{"version":7,"names":"no","nam":"no","named":"no","name":"yes","ok":true,"n":null,"f":-1.5e3}`, "yes"},
		// What it cannot tell for certain.
		{`{"name":"a\"b"}`, "?"},
		{`{"name":"caf\u00e9"}`, "?"},
		{`{"name":"café"}`, "?"},
		{`{"n\u0061me":"a"}`, "?"},
		{`{"name":null}`, "?"},
		{`{"name":"a","name":null}`, "?"},
		{`{"name":7}`, "?"},
		{`[]`, "?"},
		{`null`, "?"},
		{``, "?"},
		{`"name"`, "?"},
	} {
		got, ok := serviceName([]byte(tc.value))
		if !ok {
			got = "?"
		}
		if got != tc.want {
			t.Errorf("serviceName(%s) = %q; want %q", tc.value, got, tc.want)
		}
		if s := decode([]byte(tc.value)); ok && s != nil && s.Name != got {
			t.Errorf("serviceName(%s) = %q; decoding gives %q", tc.value, got, s.Name)
		}
	}
}

// FuzzServiceName: whenever serviceName tells a name, decoding the value
// gives that name, or nothing (the value is no service, and the event is
// skipped either way).
func FuzzServiceName(f *testing.F) {
	for _, seed := range []string{
		encode(realistic("greeter")), `{"NAME":"a","name":"b"}`, `{"metadata":{"name":"m"},"name":"top"}`,
		`{"version":"a \"name\": \"q\" \\","name":"top"}`, `{"name":"a","name":null}`, `{"name":"x","nodes":[{"id":1}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		name, ok := serviceName(value)
		if !ok {
			return
		}
		if s := decode(value); s != nil && s.Name != name {
			t.Fatalf("serviceName(%q) = %q; decoding gives %q", value, name, s.Name)
		}
	})
}

// keepOnly is a watch filter that keeps the names given, and records the
// names it is asked about.
type keepOnly struct {
	mu    sync.Mutex
	names map[string]bool
	asked []string
}

func newKeepOnly(names ...string) *keepOnly {
	k := &keepOnly{names: map[string]bool{}}
	for _, n := range names {
		k.names[n] = true
	}
	return k
}

func (k *keepOnly) keep(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.asked = append(k.asked, name)
	return k.names[name]
}

func (k *keepOnly) add(name string) {
	k.mu.Lock()
	k.names[name] = true
	k.mu.Unlock()
}

// TestResultWithAFilter: the event of a service the filter does not keep
// is skipped, whatever its value; one it keeps is decoded as without a
// filter; and what makes the stream fail still does.
func TestResultWithAFilter(t *testing.T) {
	held, other := encode(service("held", "1", "n1")), encode(service("other", "1", "n1"))
	heldKey, otherKey := nodeKey("held", "n1"), nodeKey("other", "n1")
	put := func(key, value string) clientv3.Event {
		return clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, value, 7, 9)}
	}
	del := func(key, value string) clientv3.Event {
		return clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(key, "", 0, 10), PrevKv: kv(key, value, 7, 9)}
	}
	for _, tc := range []struct {
		name    string
		ev      clientv3.Event
		action  string // "" for a skipped event
		asked   string // the name the filter is asked about; "" for none
		service string // the service delivered, if not "held"
		wantErr error
	}{
		{name: "an update of a service kept", ev: put(heldKey, held), action: "update", asked: "held"},
		{name: "a delete of a service kept", ev: del(heldKey, held), action: "delete", asked: "held"},
		{name: "an update of a service not kept", ev: put(otherKey, other), asked: "other"},
		{name: "a delete of a service not kept", ev: del(otherKey, other), asked: "other"},
		{name: "a service not kept, its value not JSON after the name",
			ev: put(otherKey, `{"name":"other","nodes":[{"id":"n1"`), asked: "other"},
		{name: "a service not kept, its value of the wrong types",
			ev: put(otherKey, `{"name":"other","nodes":7}`), asked: "other"},
		{name: "the name is the value's, not the key's",
			ev: put(otherKey, held), action: "update", asked: "held"},
		{name: "a name with a slash, which the key holds as a dash",
			ev:     put(nodeKey("team/api", "n1"), encode(service("team/api", "1", "n1"))),
			action: "update", asked: "team/api", service: "team/api"},
		{name: "a name that cannot be read at once is decoded, and delivered",
			ev: put(otherKey, `{"name":"he\u006cd","nodes":[{"id":"n1"}]}`), action: "update"},
		{name: "a value that is not a service is skipped",
			ev: put(heldKey, "not json")},
		{name: "a delete without its previous value still ends the stream",
			ev:      clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(otherKey, "", 0, 10)},
			wantErr: errNoPrevKV},
		{name: "an event without a key still ends the stream",
			ev: clientv3.Event{Type: clientv3.EventTypePut}, wantErr: errors.New("any")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newKeepOnly("held", "team/api")
			res, err := result(&tc.ev, k.keep)
			if tc.service == "" {
				tc.service = "held"
			}
			switch {
			case tc.wantErr != nil:
				if err == nil || errors.Is(tc.wantErr, errNoPrevKV) && !errors.Is(err, errNoPrevKV) {
					t.Fatalf("got %+v, %v; want error %v", res, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("error %v", err)
			case tc.action == "":
				if res != nil {
					t.Fatalf("got %s of %+v; want it skipped", res.Action, res.Service)
				}
			default:
				if res == nil || res.Action != tc.action || res.Service.Name != tc.service || res.Service.Nodes[0].Id != "n1" {
					t.Fatalf("got %+v; want %s of %s's n1", res, tc.action, tc.service)
				}
			}
			want := []string{}
			if tc.asked != "" {
				want = []string{tc.asked}
			}
			if fmt.Sprint(k.asked) != fmt.Sprint(want) {
				t.Errorf("the filter was asked about %q; want %q", k.asked, want)
			}
		})
	}
}

// TestAnEventNotKeptIsNotDecoded: skipping an event allocates its name at
// most, where decoding a go-micro server's service allocates dozens of
// objects.
func TestAnEventNotKeptIsNotDecoded(t *testing.T) {
	ev := &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(nodeKey("other", "n1"), encode(realistic("other")), 7, 9)}
	keep := func(string) bool { return false }
	if res, err := result(ev, keep); res != nil || err != nil {
		t.Fatalf("result: %+v, %v; want it skipped", res, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = result(ev, keep) }); n > 1 {
		t.Errorf("skipping an event: %v allocations; want at most 1, its name", n)
	}
	decoded := testing.AllocsPerRun(100, func() { _, _ = result(ev, nil) })
	t.Logf("the same event decoded: %v allocations", decoded)
}

// TestNextAsksTheFilterAsEachEventComes: Next asks the filter about each
// event when it comes to it, so a service that the filter keeps from some
// point on has its next event delivered, even from a response received
// before.
func TestNextAsksTheFilterAsEachEventComes(t *testing.T) {
	ev := func(name, node string) *clientv3.Event {
		return &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(nodeKey(name, node), encode(service(name, "1", node)), 9, 9)}
	}
	ch := make(chan clientv3.WatchResponse, 2)
	ch <- clientv3.WatchResponse{Events: []*clientv3.Event{ev("late", "l1"), ev("held", "h1"), ev("late", "l2"), ev("other", "o1")}}
	ch <- clientv3.WatchResponse{Events: []*clientv3.Event{ev("other", "o2"), ev("late", "l3")}}
	w := fakeWatcher(ch)
	defer w.Stop()
	k := newKeepOnly("held")
	w.keep = k.keep

	if res, err := next(t, w, 5*time.Second); err != nil || res.Service.Nodes[0].Id != "h1" {
		t.Fatalf("Next: %+v, %v; want held's h1, late's l1 skipped", res, err)
	}
	k.add("late") // a lookup of late starts
	for _, want := range []string{"l2", "l3"} {
		if res, err := next(t, w, 5*time.Second); err != nil || res.Service.Nodes[0].Id != want {
			t.Fatalf("Next: %+v, %v; want late's %s", res, err, want)
		}
	}
	if got := strings.Join(k.asked, " "); got != "late held late other other late" {
		t.Errorf("the filter was asked about %s", got)
	}
}

// TestWatchTakesTheFilterOfItsContext: Watch finds the filter in the
// context of registry.WatchContext, as a regcache cache puts it there,
// and skips the events of the services it does not keep; without one,
// every event comes.
func TestWatchTakesTheFilterOfItsContext(t *testing.T) {
	checkNoWatcherLeft(t)
	s := startEtcd(t)
	r := newTestRegistry(t, s.Addr(), time.Second)
	kvc := newClient(t, s.Addr())
	k := newKeepOnly("held")
	filtered := watch(t, r, registry.WatchContext(watchscope.WithFilter(context.Background(), k.keep)))
	all := watch(t, r)

	putNode(t, kvc, service("other", "1", "o1"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := kvc.Put(ctx, nodeKey("other", "bad"), `{"name":"other","nodes":[`); err != nil {
		t.Fatalf("put: %v", err)
	}
	putNode(t, kvc, service("held", "1", "h1"))

	mustNext(t, filtered, "create", "h1")
	mustNext(t, all, "create", "o1")
	mustNext(t, all, "create", "h1")
	if got := strings.Join(k.asked, " "); got != "other other held" {
		t.Errorf("the filter was asked about %s", got)
	}
}

// BenchmarkResult: an event of a go-micro server's service, decoded (no
// filter, or a filter that keeps it) and skipped.
func BenchmarkResult(b *testing.B) {
	value, _ := json.Marshal(realistic("it.scope.0042"))
	ev := &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(nodeKey("it.scope.0042", "n1"), string(value), 7, 9)}
	for _, bc := range []struct {
		name string
		keep func(string) bool
	}{
		{"no filter", nil},
		{"kept", func(string) bool { return true }},
		{"not kept", func(string) bool { return false }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = result(ev, bc.keep)
			}
		})
	}
}
