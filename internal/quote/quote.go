// Package quote quotes the names that callers pass, such as service
// names, for error messages and log lines. Names come from callers, and a
// gateway may pass on whatever its clients send: a 1 MiB name must not
// make a 1 MiB error or log line.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// MaxName is the longest name, in bytes, that Name quotes in full.
const MaxName = 128

// Name quotes name, cut to MaxName bytes at a character boundary and
// followed by its full length when cut.
func Name(name string) string {
	if len(name) <= MaxName {
		return strconv.Quote(name)
	}
	cut := MaxName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return strconv.Quote(name[:cut]) + "... (" + strconv.Itoa(len(name)) + " bytes)"
}
