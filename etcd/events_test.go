package etcd

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func kv(key, value string, createRev, modRev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: createRev, ModRevision: modRev}
}

// TestResult: each kind of etcd event on a node key, as go-micro's
// registry.Result.
func TestResult(t *testing.T) {
	svc := encode(service("greeter", "1", "n1"))
	key := nodeKey("greeter", "n1")
	for _, tc := range []struct {
		name    string
		ev      clientv3.Event
		action  string // "" for a skipped event
		wantErr error
	}{
		{name: "a put of a new key is a create",
			ev: clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, svc, 7, 7)}, action: "create"},
		{name: "a put of a key that exists is an update",
			ev: clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, svc, 7, 9)}, action: "update"},
		{name: "a delete is a delete of the previous value's service",
			ev:     clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(key, "", 0, 10), PrevKv: kv(key, svc, 7, 9)},
			action: "delete"},
		{name: "a delete without its previous value is an error, not a panic",
			ev:      clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(key, "", 0, 10)},
			wantErr: errNoPrevKV},
		{name: "a put of a value that is not a service is skipped",
			ev: clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, "not json", 7, 7)}},
		{name: "a put of null is skipped",
			ev: clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, "null", 7, 7)}},
		{name: "a delete of a value that is not a service is skipped",
			ev: clientv3.Event{Type: clientv3.EventTypeDelete, Kv: kv(key, "", 0, 10), PrevKv: kv(key, "{", 7, 9)}},
		{name: "an event of unknown type is an error",
			ev:      clientv3.Event{Type: 7, Kv: kv(key, svc, 7, 7)},
			wantErr: errors.New("any")},
		{name: "an event without a key is an error",
			ev:      clientv3.Event{Type: clientv3.EventTypePut},
			wantErr: errors.New("any")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := result(&tc.ev, nil)
			switch {
			case tc.wantErr != nil:
				if err == nil {
					t.Fatalf("got %+v, no error", res)
				}
				if errors.Is(tc.wantErr, errNoPrevKV) && !errors.Is(err, errNoPrevKV) {
					t.Fatalf("error %v; want %v", err, errNoPrevKV)
				}
			case err != nil:
				t.Fatalf("error %v", err)
			case tc.action == "":
				if res != nil {
					t.Fatalf("got %+v; want it skipped", res)
				}
			default:
				if res == nil || res.Action != tc.action {
					t.Fatalf("got %+v; want %s", res, tc.action)
				}
				if res.Service.Name != "greeter" || len(res.Service.Nodes) != 1 || res.Service.Nodes[0].Id != "n1" {
					t.Fatalf("service %+v; want greeter's node n1", res.Service)
				}
			}
		})
	}
}

// TestWatchPrefix: the keys a watch covers are the plugin's, and a
// service's never cover another's whose name starts with it.
func TestWatchPrefix(t *testing.T) {
	for service, want := range map[string]string{
		"":         "/micro/registry/",
		"greeter":  "/micro/registry/greeter/",
		"team/api": "/micro/registry/team-api/",
	} {
		if got := watchPrefix(service); got != want {
			t.Errorf("watchPrefix(%q) = %q; want %q", service, got, want)
		}
	}
}

// TestDecode: a value is a service, or nothing.
func TestDecode(t *testing.T) {
	s := decode([]byte(encode(service("greeter", "1", "n1"))))
	if s == nil || s.Name != "greeter" || s.Version != "1" || s.Metadata["v"] != "1" {
		t.Errorf("decode = %+v", s)
	}
	for _, bad := range []string{"", "null", "[]", `{"name": 7}`, "{"} {
		if s := decode([]byte(bad)); s != nil {
			t.Errorf("decode(%q) = %+v; want nil", bad, s)
		}
	}
}
