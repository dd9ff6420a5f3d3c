package etcd

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"go-micro.dev/v4/registry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// prefix is where the plugin keeps the registry: a key per node, under
// prefix + service name + "/".
const prefix = "/micro/registry/"

// watchPrefix is the keys a watch covers: the whole registry, or the nodes
// of one service, its name made into a path element as the plugin's
// servicePath does. The trailing "/" keeps "greeter" from covering
// "greeter2".
func watchPrefix(service string) string {
	if service == "" {
		return prefix
	}
	return path.Join(prefix, strings.ReplaceAll(service, "/", "-")) + "/"
}

// errNoPrevKV is a delete whose previous value etcd did not send, so that
// the node it removes is unknown. The plugin crashes on it; here Next
// returns it, and a cache resyncs.
var errNoPrevKV = errors.New("etcd: a delete without its previous value")

// result translates one etcd event on a node key into go-micro's
// registry.Result: a put is a "create" or an "update" of the service in
// the value; a delete is a "delete" of the service in the previous value,
// which the watch asks etcd for. It returns nil, nil for a value that is
// not a service, which is skipped as the plugin's GetService skips it, and
// for the service of a value that keep, if not nil, does not keep, asked
// before the value is decoded (watchscope.Filter); and an error for a
// delete without its previous value or an event of no known type, after
// which the stream can no longer be trusted.
func result(ev *clientv3.Event, keep func(service string) bool) (*registry.Result, error) {
	if ev.Kv == nil {
		return nil, errors.New("etcd: an event without its key")
	}
	var action string
	var value []byte
	switch ev.Type {
	case clientv3.EventTypePut:
		action, value = "update", ev.Kv.Value
		if ev.IsCreate() {
			action = "create"
		}
	case clientv3.EventTypeDelete:
		if ev.PrevKv == nil {
			return nil, fmt.Errorf("%w: %s", errNoPrevKV, ev.Kv.Key)
		}
		action, value = "delete", ev.PrevKv.Value
	default:
		return nil, fmt.Errorf("etcd: an event of unknown type %v on %s", ev.Type, ev.Kv.Key)
	}
	if keep != nil {
		if name, ok := serviceName(value); ok && !keep(name) {
			return nil, nil
		}
	}
	s := decode(value)
	if s == nil {
		return nil, nil
	}
	return &registry.Result{Action: action, Service: s}, nil
}

// decode is the plugin's decoding of a node key's value, the JSON of a
// registry.Service, except that a value that is not one is nil rather
// than a half-filled service.
func decode(value []byte) *registry.Service {
	var s *registry.Service
	if err := json.Unmarshal(value, &s); err != nil {
		return nil
	}
	return s
}
