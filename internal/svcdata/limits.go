package svcdata

import (
	"errors"
	"fmt"

	"go-micro.dev/v4/registry"
)

// ErrAnswerTooLarge is matched (with errors.Is) by the error for a registry
// answer, or a watch event, that the cache refuses to copy: one version of
// a service past the bounds below. A Value reached by several paths counts
// once per path, because whoever walks the tree (the snapshot file's
// encoder, a debug print) visits it once per path. go-micro's servers
// describe endpoints three levels deep, so no real registration comes near
// these bounds; they keep a broken or hostile registry from exhausting the
// stack or the memory of every client. The cache exports it as its own
// ErrAnswerTooLarge.
var ErrAnswerTooLarge = errors.New("registry answer too large to copy")

const (
	// maxValueDepth bounds how deep an endpoint's Value tree may nest,
	// counting its Request or Response as level 1.
	maxValueDepth = 32
	// maxValueNodes bounds the Value nodes of one version, once per path.
	maxValueNodes = 1 << 16
	// maxCopyItems bounds the work of copying one version: its nodes,
	// endpoints, metadata entries, Value nodes and Values slice entries.
	maxCopyItems = 1 << 20
	// memoValues is the number of Value nodes per version above which
	// the copy remembers each Value it has copied, so that one reached by
	// several paths is copied once. Below it, a shared Value is copied
	// once per path, into one allocation, which costs at most a few
	// kilobytes and spares the common case a map.
	memoValues = 256
)

// tooLargeError names the version of the service that could not be copied
// and why.
type tooLargeError struct {
	service, version string
	reason           string
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("regcache: service %q version %q: %v: %s", e.service, e.version, ErrAnswerTooLarge, e.reason)
}

func (e *tooLargeError) Unwrap() error { return ErrAnswerTooLarge }

// measure is what copying one version will cost, found by walking it
// before copying anything. The walk stops at the first bound exceeded, so
// it costs at most maxCopyItems steps whatever the input: a cycle, or a
// tree that doubles at every level through shared Values, is refused
// after a bounded walk.
type measure struct {
	nodes, endpoints int // non-nil ones
	values, slots    int // Value nodes and Values entries, once per path
	items            int // everything, against maxCopyItems
	path             [maxValueDepth + 1]*registry.Value
	reason           string // why the copy is refused
}

func (m *measure) service(s *registry.Service) bool {
	m.items = len(s.Metadata) + len(s.Nodes) + len(s.Endpoints)
	for _, n := range s.Nodes {
		if n != nil {
			m.nodes++
			m.items += len(n.Metadata)
		}
	}
	if !m.check() {
		return false
	}
	for _, e := range s.Endpoints {
		if e == nil {
			continue
		}
		m.endpoints++
		m.items += len(e.Metadata)
		if !m.value(e.Request, 1) {
			m.reason = fmt.Sprintf("endpoint %q request: %s", e.Name, m.reason)
			return false
		}
		if !m.value(e.Response, 1) {
			m.reason = fmt.Sprintf("endpoint %q response: %s", e.Name, m.reason)
			return false
		}
	}
	return m.check()
}

func (m *measure) check() bool {
	if m.items > maxCopyItems {
		m.reason = fmt.Sprintf("more than %d nodes, endpoints, metadata entries and Values", maxCopyItems)
		return false
	}
	return true
}

// value walks v, at depth (1 for a Request or Response), counting each
// node once per path. Its recursion is bounded by maxValueDepth.
func (m *measure) value(v *registry.Value, depth int) bool {
	if v == nil {
		return true
	}
	if depth > maxValueDepth {
		m.reason = fmt.Sprintf("Values nested deeper than %d levels", maxValueDepth)
		if m.cyclic() {
			m.reason = "Values form a cycle"
		}
		return false
	}
	m.path[depth] = v
	m.values++
	m.slots += len(v.Values)
	m.items += 1 + len(v.Values)
	if m.values > maxValueNodes {
		m.reason = fmt.Sprintf("more than %d Value nodes", maxValueNodes)
		return false
	}
	if !m.check() {
		return false
	}
	for _, sub := range v.Values {
		if !m.value(sub, depth+1) {
			return false
		}
	}
	return true
}

// cyclic reports whether the path the walk gave up on visits a Value
// twice.
func (m *measure) cyclic() bool {
	for i := 1; i <= maxValueDepth; i++ {
		for j := i + 1; j <= maxValueDepth; j++ {
			if m.path[i] == m.path[j] {
				return true
			}
		}
	}
	return false
}

// valueCopier copies the Value trees of one version, after measure has
// accepted them. With vals and slots it copies each path into those
// buffers, which measure sized exactly; with seen it copies each distinct
// Value once, so that shared ones stay shared.
type valueCopier struct {
	vals  []registry.Value
	slots []*registry.Value
	seen  map[*registry.Value]*registry.Value
}

func (vc *valueCopier) value(v *registry.Value) *registry.Value {
	if v == nil {
		return nil
	}
	var c *registry.Value
	if vc.seen != nil {
		if done, ok := vc.seen[v]; ok {
			return done
		}
		c = &registry.Value{Name: v.Name, Type: v.Type}
		vc.seen[v] = c
	} else {
		c = &vc.vals[0]
		vc.vals = vc.vals[1:]
		*c = registry.Value{Name: v.Name, Type: v.Type}
	}
	if n := len(v.Values); n > 0 {
		var kids []*registry.Value
		if vc.seen != nil {
			kids = make([]*registry.Value, n)
		} else {
			// Capped, so that an append by a reader reallocates rather
			// than overwrite a sibling's entries.
			kids = vc.slots[:n:n]
			vc.slots = vc.slots[n:]
		}
		for i, sub := range v.Values {
			kids[i] = vc.value(sub)
		}
		c.Values = kids
	}
	return c
}
