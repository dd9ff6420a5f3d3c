package etcd

// serviceName returns the name of the service in value, the JSON of a
// registry.Service, as decode would give it, without decoding the rest:
// the string of the last member of the top-level object whose key is
// "name" in any case, which is what encoding/json sets Service.Name from.
// It reads the structure only, in about the time it takes to look at
// each byte once, and allocates nothing but the name.
//
// ok is false when it cannot tell for certain at that cost (a key or the
// name with an escape, a name beyond ASCII or not a string, a value that
// is not an object), and the value must be decoded to know. On a value
// that is not valid JSON it may tell any name: decode gives nil for such a
// value, so its event is skipped whatever the name.
//
// The key of a node, /micro/registry/<name>/<node id>, would be cheaper
// to read, but the plugin writes the name there with each "/" made "-",
// so a name read from a key may be any of several.
func serviceName(value []byte) (name string, ok bool) {
	var last []byte
	found := false
	// invalid ends the scan of a value that is not valid JSON.
	invalid := func() (string, bool) {
		if !found {
			return "", false
		}
		return string(last), true
	}
	i := skipSpace(value, 0)
	if i == len(value) || value[i] != '{' {
		return "", false
	}
	i = skipSpace(value, i+1)
	if i < len(value) && value[i] == '}' {
		return "", true
	}
	for {
		if i == len(value) || value[i] != '"' {
			return invalid()
		}
		end, plain := scanString(value, i)
		if end < 0 {
			return invalid()
		}
		if !plain {
			return "", false // an escaped key may be "name"
		}
		isName := isNameKey(value[i+1 : end-1])
		i = skipSpace(value, end)
		if i == len(value) || value[i] != ':' {
			return invalid()
		}
		i = skipSpace(value, i+1)
		if isName {
			if i == len(value) || value[i] != '"' {
				return "", false // null, or not a string
			}
			end, plain = scanString(value, i)
			if end < 0 {
				return invalid()
			}
			if !plain || !ascii(value[i+1:end-1]) {
				return "", false
			}
			last, found = value[i+1:end-1], true
			i = end
		} else if i = skipValue(value, i); i < 0 {
			return invalid()
		}
		i = skipSpace(value, i)
		switch {
		case i == len(value):
			return invalid()
		case value[i] == ',':
			i = skipSpace(value, i+1)
		case value[i] == '}':
			return string(last), true
		default:
			return invalid()
		}
	}
}

// isNameKey reports whether key (plain ASCII or not) matches "name" as
// encoding/json matches keys to fields: exactly or under Unicode case
// folding, where no character but the four letters' own cases folds to
// them.
func isNameKey(key []byte) bool {
	if len(key) != 4 {
		return false
	}
	for i, c := range key {
		if c|0x20 != "name"[i] {
			return false
		}
	}
	return true
}

// ascii reports whether b has only printable ASCII, which encoding/json
// copies into a string as it is.
func ascii(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// skipSpace returns the index of the first byte from i on that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the string that starts with the
// quote at b[i], and whether it has no escape; -1 if it does not end.
func scanString(b []byte, i int) (end int, plain bool) {
	plain = true
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			plain = false
			i++
		case '"':
			return i + 1, plain
		}
	}
	return -1, false
}

// skipValue returns the index just past the JSON value that starts at
// b[i], or -1 where a valid value could not end.
func skipValue(b []byte, i int) int {
	if i == len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, _ := scanString(b, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: up to the next delimiter.
	start := i
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}
