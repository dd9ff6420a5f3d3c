package cache

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/regcache/cache/internal/fakereg"
	"go-micro.dev/v4/registry"
)

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
			reg.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
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
				reg.Fail(nil)
				reg.SetNodes("s")
				switch state {
				case 0:
					reg.SetNodes("s", fmt.Sprint("n", generation))
				case 1:
					reg.Fail(errDown)
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
					if reg.Calls("s") != calls {
						t.Fatalf("step %d: %d registry calls, model says %d", i, reg.Calls("s"), calls)
					}
				}
			}
		})
	})
}
