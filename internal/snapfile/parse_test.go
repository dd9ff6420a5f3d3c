package snapfile

import (
	"encoding/json"
	"testing"
	"time"

	"go-micro.dev/v4/registry"

	"github.com/regcache/cache/internal/svcdata"
)

// FuzzParseSnapshot feeds the loader arbitrary bytes: it never panics, and
// whatever it accepts is usable data.
func FuzzParseSnapshot(f *testing.F) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(&File{Format: format, Version: version, Written: now.Add(-time.Minute),
		Services: []Entry{
			{Name: "a", Refreshed: now.Add(-time.Hour), Services: []*registry.Service{{Name: "a", Version: "1", Nodes: []*registry.Node{{Id: "a1"}, {Id: "a2"}}}}},
			{Name: "b", Refreshed: now.Add(time.Hour), Services: []*registry.Service{nil, {Name: "b", Nodes: []*registry.Node{nil}}}},
		}})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"format":"regcache-snapshot","version":1,"written":"2026-11-29T11:00:00Z","services":[{"name":"","services":null}]}`))
	f.Add([]byte(`{"format":"regcache-snapshot","version":1,"written":"2026-11-29T11:00:00Z","services":[{"name":"x","refreshed":"2026-11-29T11:00:00Z","services":[{"nodes":[{"id":"1"}],"endpoints":[null,{"request":{"values":[null]}}]}]}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = scan(data) // must not panic either
		got, _, err := Parse(data, now)
		if err != nil {
			if got != nil {
				t.Fatalf("data with an error: %v", got)
			}
			return
		}
		seen := map[string]bool{}
		for _, l := range got {
			if l.Name == "" || seen[l.Name] || !svcdata.HasNodes(l.Services) || l.Refreshed.After(now) ||
				now.Sub(l.Refreshed) > MaxAge {
				t.Fatalf("unusable entry accepted: %+v", l)
			}
			seen[l.Name] = true
			for _, s := range l.Services {
				if s == nil {
					t.Fatal("nil service accepted")
				}
				for _, n := range s.Nodes {
					if n == nil {
						t.Fatal("nil node accepted")
					}
				}
			}
			svcdata.CopyOut(l.Services) // must not panic either
		}
	})
}
