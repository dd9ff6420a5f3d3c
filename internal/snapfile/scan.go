package snapfile

import (
	"bytes"
	"fmt"
)

// The loader bounds the memory that decoding a snapshot file takes, not
// only its bytes: two bytes, {}, decode to a struct of a hundred bytes or
// more, so a file of empty objects took 30 to 120 times its size. Before
// decoding, one pass over the file, which allocates nothing, estimates
// that memory from the file's structure, and a file whose estimate is
// over maxDecode is refused. The estimate errs high: 299 MiB for
// the file the cache writes for 100 000 services of 3 nodes each (60 MiB,
// near the byte cap), which decodes to 259 MiB, and 997 MiB for 16 MiB of
// empty nodes, which decode to 514 MiB.
const (
	maxDecode = 384 << 20
	// maxDepth bounds how deeply a file nests; Values nested to
	// the copy's limit need about 75 levels.
	maxDepth = 128
)

// What decoding costs, in bytes of memory allocated, measured for each
// kind of object on encoding/json's decoding of empty or small objects
// (the worst case for each), rounded up. The strings cost about their
// bytes, and the file's size is added for them.
const (
	costEntry       = 384 // a service the file lists: its struct, two times, a growing slice
	costObject      = 144 // a Service, Node, Endpoint, Value or map, and its pointer
	costElement     = 40  // an array element: a pointer in a slice that grows
	costSmallMember = 48  // one of a map's first 8 entries, in its first group
	costMember      = 192 // a later entry, with the growth of the map
	smallMap        = 8
)

// container is what an open bracket of the file decodes to.
type container uint8

const (
	inArray container = iota
	inStruct
	inMap
)

// scanSnapshot checks, in one pass over data and without allocating, that
// decoding it stays within maxDecode. It reads the JSON's
// structure, not the names of fields, except to tell an endpoint's
// request and response (structs) from metadata (maps): every object that
// is the value of another field counts as a map, the dearer guess, so no
// spelling of a field name makes a file look cheaper than it is. The
// services a file lists are the objects in the array in the root object.
// Malformed JSON is left for the decoder to reject.
func scan(data []byte) error {
	cost, err := decodeCost(data)
	if err != nil {
		return err
	}
	if cost > maxDecode {
		return fmt.Errorf("decoding it would take more than %d MiB", maxDecode>>20)
	}
	return nil
}

// decodeCost estimates the memory decoding data takes. It stops early once
// the estimate is over maxDecode.
func decodeCost(data []byte) (int, error) {
	var (
		cost, depth       int
		kinds             [maxDepth + 1]container
		members           [maxDepth + 1]int // of the map open at each depth
		inString, escaped bool
		start             int    // of the string being read
		last, key         []byte // the last string read, and the last key
		lastEscaped       bool
	)
	cost = len(data)
	for i, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped, lastEscaped = true, true
			case b == '"':
				inString, last = false, data[start:i]
			}
			continue
		}
		switch b {
		case '"':
			inString, start, lastEscaped = true, i+1, false
		case ':':
			key = last
			if lastEscaped {
				key = nil // never matches a struct's field below
			}
			if kinds[depth] == inMap {
				members[depth]++
				if members[depth] <= smallMap {
					cost += costSmallMember
				} else {
					cost += costMember
				}
			}
		case ',':
			if kinds[depth] == inArray {
				cost += costElement
			}
		case '[', '{':
			k := inArray
			if b == '[' {
				cost += costElement // its first element
			} else {
				k = inStruct
				cost += costObject
				switch {
				case kinds[depth] == inArray && depth == 2:
					cost += costEntry - costObject
				case depth == 0 || kinds[depth] == inArray:
				case kinds[depth] == inStruct && (bytes.EqualFold(key, []byte("request")) ||
					bytes.EqualFold(key, []byte("response"))):
				default:
					k = inMap
				}
			}
			depth++
			if depth > maxDepth {
				return cost, fmt.Errorf("nested deeper than %d levels", maxDepth)
			}
			kinds[depth], members[depth] = k, 0
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
		if cost > maxDecode {
			return cost, nil
		}
	}
	return cost, nil
}
