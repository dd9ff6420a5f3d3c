//go:build go1.25

package cache

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"go-micro.dev/v4/registry"
)

// FuzzApplyEvent checks event application against a plain model: a set of
// node ids per version. Each byte of the input is one event.
func FuzzApplyEvent(f *testing.F) {
	f.Add([]byte{0x00, 0x11, 0x22, 0x33})
	f.Add([]byte{0x05, 0x45, 0x85, 0xc5})       // create then delete the same node
	f.Add([]byte{0x0f, 0x8f, 0x8f, 0x0f, 0xcf}) // all nodes, duplicates, an unknown action
	f.Add([]byte{0x80, 0x90, 0x00, 0x10, 0x20}) // deletes before creates
	f.Add([]byte{0x30, 0x31, 0x32, 0x33, 0x34}) // versions and empty events
	f.Fuzz(func(t *testing.T, data []byte) {
		var cur []*registry.Service
		model := map[string]map[string]bool{}
		for i, b := range data {
			ev := decodeEvent(b)
			before := fmt.Sprint(viewOf(cur))
			next, ok := applyEvent(cur, ev)
			if fmt.Sprint(viewOf(cur)) != before {
				t.Fatalf("event %d changed the snapshot it was applied to", i)
			}
			wantOK := applyModel(model, ev)
			if ok != wantOK {
				t.Fatalf("event %d (%s %v): applied=%v, model says %v", i, ev.Action, ev.Service.Nodes, ok, wantOK)
			}
			if !ok {
				continue
			}
			cur = next
			if got, want := fmt.Sprint(sortedView(cur)), fmt.Sprint(sortedModel(model)); got != want {
				t.Fatalf("event %d (%s): got %s, model %s", i, ev.Action, got, want)
			}
			for _, s := range cur {
				if len(s.Nodes) == 0 {
					t.Fatalf("event %d left version %q with no nodes", i, s.Version)
				}
			}
		}
	})
}

// decodeEvent reads one event from a byte: the top two bits pick the
// action, the next two the version, the low four a set of nodes.
func decodeEvent(b byte) *registry.Result {
	actions := []string{"create", "update", "delete", "expire"}
	s := &registry.Service{Name: "s", Version: fmt.Sprint(b >> 4 & 3)}
	for i, id := range []string{"a", "b", "c", "d"} {
		if b&(1<<i) != 0 {
			s.Nodes = append(s.Nodes, &registry.Node{Id: id, Address: id})
		}
	}
	return &registry.Result{Action: actions[b>>6], Service: s}
}

// applyModel applies ev to the model and reports whether it applies.
func applyModel(m map[string]map[string]bool, ev *registry.Result) bool {
	if len(ev.Service.Nodes) == 0 {
		return false
	}
	// A node Id is one instance, in one version at a time: an event for
	// it takes it out of every other version.
	v := ev.Service.Version
	drop := func(except string) {
		for version, ids := range m {
			if version == except {
				continue
			}
			for _, n := range ev.Service.Nodes {
				delete(ids, n.Id)
			}
			if len(ids) == 0 {
				delete(m, version)
			}
		}
	}
	switch ev.Action {
	case "create", "update":
		drop(v)
		if m[v] == nil {
			m[v] = map[string]bool{}
		}
		for _, n := range ev.Service.Nodes {
			m[v][n.Id] = true
		}
	case "delete":
		if m[v] == nil {
			return true // a delete for an unknown version changes nothing
		}
		drop("")
	default:
		return false
	}
	return true
}

func sortedView(svcs []*registry.Service) map[string][]string {
	v := viewOf(svcs)
	for k := range v {
		sort.Strings(v[k])
	}
	return v
}

func sortedModel(m map[string]map[string]bool) map[string][]string {
	v := map[string][]string{}
	for version, ids := range m {
		for id := range ids {
			v[version] = append(v[version], id)
		}
		sort.Strings(v[version])
	}
	return v
}

// FuzzReadPath drives one service through lookups, time passing and
// registry changes, and checks every answer, and the registry calls, against
// a model of the read path written from the contract. Each byte is one step.
// The registry's watch fails, so no event or re-validation interferes, and
// the registry-wide state is off (it has a test of its own), so that the
// model is one service's.
func FuzzReadPath(f *testing.F) {
	f.Add([]byte{0x00, 0x40, 0x40, 0xc1, 0x40, 0x81, 0x40})
	f.Add([]byte{0x81, 0x40, 0x40, 0xcf, 0x40, 0x80, 0x40, 0xc9, 0x40})
	f.Add([]byte{0x82, 0x40, 0x40, 0xc3, 0x40, 0x80, 0x40, 0xff, 0x40, 0x40})
	f.Add([]byte{0x40, 0xc0, 0x40, 0xc0, 0x40, 0x82, 0xc4, 0x40, 0x80, 0xc4, 0x40})
	f.Add([]byte{0x40, 0x14, 0x40, 0x40, 0x03, 0x40, 0x81, 0x14, 0x40, 0x40, 0x07, 0x40}) // stale inside and after the window
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 200 {
			steps = steps[:200]
		}
		synctest.Test(t, func(t *testing.T) {
			const ttl, interval = 2 * time.Second, 700 * time.Millisecond
			reg := newFakeRegistry()
			reg.watchErr = errDown
			c, _ := newTestCache(t, reg, WithTTL(ttl), WithMinimumRetryInterval(interval), WithProbeInterval(0))
			defer c.Stop()

			// The model.
			var (
				state       = 0 // 0 healthy, 1 failing, 2 not found
				generation  = 0 // the registry answers with node "n<generation>"
				hasData     bool
				data        string
				expiry      time.Time
				attempted   bool
				lastAttempt time.Time
				notFound    bool // the last attempt's answer: no such service
				calls       int
			)
			setRegistry := func() {
				reg.fail(nil)
				reg.set("s")
				switch state {
				case 0:
					reg.set("s", fmt.Sprint("n", generation))
				case 1:
					reg.fail(errDown)
				}
			}
			setRegistry()
			for i, b := range steps {
				switch b >> 6 {
				case 0: // time passes
					time.Sleep(time.Duration(b&63) * 100 * time.Millisecond)
					synctest.Wait()
				case 2: // the registry changes
					state = int(b&63) % 3
					generation++
					setRegistry()
				default: // a lookup
					now := time.Now()
					got, err := c.Lookup("s")
					synctest.Wait()
					var wantData string
					var wantErr error
					switch {
					case hasData && now.Before(expiry):
						wantData = data
					case attempted && now.Sub(lastAttempt) < interval:
						switch {
						case hasData:
							wantData = data
						case notFound:
							wantErr = registry.ErrNotFound // itself: checked with ==
						default:
							wantErr = ErrThrottled
						}
					default:
						calls++
						attempted, lastAttempt, notFound = true, now, state == 2
						if hasData {
							wantData = data // stale, served at once
						}
						switch state {
						case 0:
							if !hasData {
								wantData = fmt.Sprint("n", generation)
							}
							hasData, data, expiry = true, fmt.Sprint("n", generation), now.Add(ttl)
						case 1:
							if !hasData {
								wantErr = errDown
							}
						case 2:
							if !hasData {
								wantErr = registry.ErrNotFound
							}
							hasData = false
						}
					}
					if wantErr == registry.ErrNotFound {
						if err != wantErr {
							t.Fatalf("step %d: got %v, %v; want registry.ErrNotFound itself", i, nodeIDs(got), err)
						}
					} else if wantErr != nil {
						if !errors.Is(err, wantErr) {
							t.Fatalf("step %d: got %v, %v; want error %v", i, nodeIDs(got), err, wantErr)
						}
					} else if err != nil || fmt.Sprint(nodeIDs(got)) != fmt.Sprint([]string{wantData}) {
						t.Fatalf("step %d: got %v, %v; want [%s]", i, nodeIDs(got), err, wantData)
					}
					if reg.callsFor("s") != calls {
						t.Fatalf("step %d: %d registry calls, model says %d", i, reg.callsFor("s"), calls)
					}
				}
			}
		})
	})
}
