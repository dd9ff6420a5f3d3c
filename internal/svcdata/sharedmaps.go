package svcdata

import (
	"maps"
	"sync"
)

// The metadata maps of a deployment's services are mostly equal: every
// node of every go-micro server carries the same broker, protocol,
// registry, server and transport, and endpoints the same stream flag. A
// small map costs over 300 bytes, whatever it holds, so one copy per
// service of each was most of what the cache held per service.
//
// Metadata maps are read-only once cached, so the cache holds each small
// one once, across services and caches: a copy finds an equal map held
// already by its print, checks that it is equal, and shares it. The table
// is bounded, and starts afresh when full, so that maps no service holds
// any more are not pinned for long: that only costs the sharing of the
// maps copied next, never a wrong map.
var sharedMaps struct {
	mu sync.Mutex
	m  map[uint64]sharedMap
}

// A sharedMap is a map the table holds, and its entries, each key followed
// by its value: a map is found equal to it by looking them up, which costs
// less than starting a walk of either map.
type sharedMap struct {
	m  map[string]string
	kv []string
}

const (
	// maxSharedMaps bounds the maps the table holds: at most about 600 KB
	// of maps that no service holds any more, with their lists of entries.
	maxSharedMaps = 1024
	// maxSharedMapLen bounds the entries of a map that is shared: larger
	// ones are rarely equal, and take more to compare than they save.
	maxSharedMapLen = 8
)

// copyMap returns the cache's own copy of m: an equal map that the cache
// holds already, or a new copy. nil stays nil.
func copyMap(m map[string]string) map[string]string {
	if m == nil || len(m) > maxSharedMapLen {
		return maps.Clone(m)
	}
	return copyPrintedMap(m, metaPrint(m))
}

// copyPrintedMap is copyMap of a small map m whose print is p.
func copyPrintedMap(m map[string]string, p uint64) map[string]string {
	if m == nil || len(m) > maxSharedMapLen {
		return maps.Clone(m)
	}
	sharedMaps.mu.Lock()
	held, ok := sharedMaps.m[p]
	sharedMaps.mu.Unlock()
	if ok && len(held.kv) == 2*len(m) && holdsAll(m, held.kv) {
		return held.m
	}
	c := maps.Clone(m)
	if !ok {
		kv := make([]string, 0, 2*len(c))
		for k, v := range c {
			kv = append(kv, k, v)
		}
		sharedMaps.mu.Lock()
		if len(sharedMaps.m) >= maxSharedMaps || sharedMaps.m == nil {
			sharedMaps.m = make(map[uint64]sharedMap)
		}
		sharedMaps.m[p] = sharedMap{m: c, kv: kv}
		sharedMaps.mu.Unlock()
	}
	return c
}
