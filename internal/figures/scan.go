package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A number as a document writes it, with its unit.
type number struct {
	kind   string  // count, time (in ns), percent, ratio, size (in bytes)
	value  float64 //
	digits int     // significant digits as written: 3 for 12.0 ms or 427, 1 for 5.00 s
	// start and end are where the number and its unit are in the line.
	start, end int
}

// key identifies a number's value: a count exactly, anything else to three
// significant digits, so that 5.17 ms and 5172 µs have the same key.
func (n number) key() string {
	if n.kind == "count" {
		return n.kind + " " + strconv.FormatFloat(n.value, 'f', -1, 64)
	}
	return n.kind + " " + strconv.FormatFloat(n.value, 'g', 3, 64)
}

var digitsRe = regexp.MustCompile(`\d{1,3}(?:[ ,]\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?`)

// units are the units a number may carry, with or without a space: its
// kind, and how many of the kind's base unit it is.
var units = []struct {
	name, kind string
	scale      float64
}{
	{"ns", "time", 1}, {"µs", "time", 1e3}, {"us", "time", 1e3}, {"ms", "time", 1e6}, {"s", "time", 1e9},
	{"KB", "size", 1e3}, {"B", "size", 1}, {"%", "percent", 1}, {"×", "ratio", 1},
}

// numbers are the numbers of a line that read as figures: not part of a
// name, a version (v4.11.0, 3.5.36) or a path.
func numbers(line string) []number {
	var out []number
	for _, m := range digitsRe.FindAllStringIndex(line, -1) {
		if r, _ := utf8.DecodeLastRuneInString(line[:m[0]]); m[0] > 0 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._/#-", r)) {
			continue
		}
		rest := line[m[1]:]
		if len(rest) > 1 && rest[0] == '.' && rest[1] >= '0' && rest[1] <= '9' {
			continue // a version
		}
		text := strings.NewReplacer(" ", "", ",", "").Replace(line[m[0]:m[1]])
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			continue
		}
		n := number{kind: "count", value: v, digits: significant(text), start: m[0], end: m[1]}
		after := strings.TrimPrefix(rest, " ")
		for _, u := range units {
			if !strings.HasPrefix(after, u.name) {
				continue
			}
			if r, _ := utf8.DecodeRuneInString(after[len(u.name):]); unicode.IsLetter(r) {
				continue // "5 services"
			}
			n.kind, n.value = u.kind, v*u.scale
			n.end = m[1] + len(rest) - len(after) + len(u.name)
			break
		}
		if r, _ := utf8.DecodeRuneInString(rest); n.kind == "count" && unicode.IsLetter(r) {
			continue // "3rd", "2x"
		}
		out = append(out, n)
	}
	return out
}

// significant counts the significant digits of a decimal: 3 for 427 and
// 12.0 and 0.0512, 1 for 5.00 and 200.
func significant(s string) int {
	s = strings.TrimLeft(strings.Replace(s, ".", "", 1), "0")
	return len(strings.TrimRight(s, "0"))
}

// measures are what the demo counts, as a sentence writes them after the
// number, the longer of two that start alike first: a number so followed
// is a figure of the demo, whatever its value.
var measures = []string{"registry calls", "calls", "failed lookups", "failed RPCs", "failed", "lookups failed", "RPCs failed"}

// figureOfTheDemo says where the figure of the demo that starts with n
// ends in line, if n reads as one: a count followed by what the demo
// counts (427 registry calls, 50 failed, 0 of 1 199 RPCs). The calls the
// registry takes at a time are a setting.
func figureOfTheDemo(line string, n number) (end int, ok bool) {
	if n.kind != "count" {
		return 0, false
	}
	rest := strings.TrimLeft(line[n.end:], " ")
	at := len(line) - len(rest)
	if strings.HasPrefix(rest, "calls at a time") {
		return 0, false
	}
	for _, m := range measures {
		if strings.HasPrefix(rest, m) {
			return at + len(m), true
		}
	}
	if of, ok := strings.CutPrefix(rest, "of "); ok {
		for _, m := range numbers(of) {
			after := strings.TrimLeft(of[m.end:], " ")
			if m.start == 0 && m.kind == "count" && strings.HasPrefix(after, "RPCs") {
				return len(line) - len(after) + len("RPCs"), true
			}
			break
		}
	}
	return 0, false
}

// visible is text with what the check does not read blanked out, line
// breaks kept: the contents of the marked blocks, the markers and other
// HTML comments, fenced code and code spans (commands, and output quoted
// whole).
func visible(text string, blocks []markedBlock) string {
	b := []byte(text)
	fill := func(from, to int, with byte) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = with
			}
		}
	}
	for _, bl := range blocks {
		fill(bl.start, bl.end, ' ')
	}
	at, fenced := 0, false
	for _, line := range strings.SplitAfter(text, "\n") {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if fenced || fence {
			fill(at, at+len(line), ' ')
		}
		if fence {
			fenced = !fenced
		}
		at += len(line)
	}
	for _, m := range htmlComment.FindAllIndex(b, -1) {
		fill(m[0], m[1], ' ')
	}
	// A code span reads as a word: "60 `GetService` calls" counts no
	// calls of the demo's.
	for _, m := range codeSpan.FindAllIndex(b, -1) {
		fill(m[0], m[1], '_')
	}
	return string(b)
}

var (
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	codeSpan    = regexp.MustCompile("`[^`\n]*`")
)

// outside reports the figures of the demo that a document types outside
// the marked blocks: a number equal to a measured figure that a block
// shows (to its three significant digits, when it has at least three,
// so that settings such as 5 s or 200 ms do not count), or a count of
// what the demo counts. whole says to read the whole document; otherwise
// only its paragraphs that name the demo are read.
func outside(path, text string, blocks []markedBlock, shown map[string]figure, whole bool) []string {
	var problems []string
	lines := strings.Split(visible(text, blocks), "\n")
	raw := strings.Split(text, "\n")
	for _, para := range paragraphs(raw) {
		if !whole && !mentionsTheDemo(raw[para[0]:para[1]]) {
			continue
		}
		for i := para[0]; i < para[1]; i++ {
			line, read := lines[i], 0
			for _, n := range numbers(line) {
				if n.start < read {
					continue // within a figure reported
				}
				read = n.end
				if f, ok := shown[n.key()]; ok {
					problems = append(problems, fmt.Sprintf("%s:%d: %q is the figure %q of block %s, typed outside a marked block",
						path, i+1, line[n.start:n.end], f.text, f.block))
				} else if end, ok := figureOfTheDemo(line, n); ok {
					read = end
					problems = append(problems, fmt.Sprintf("%s:%d: %q reads as a figure of the demo, typed outside a marked block",
						path, i+1, line[n.start:end]))
				}
			}
		}
	}
	return problems
}

// paragraphs are the runs of lines that are not blank, as [from, to)
// line indexes.
func paragraphs(lines []string) [][2]int {
	var out [][2]int
	start := -1
	for i := 0; i <= len(lines); i++ {
		blank := i == len(lines) || strings.TrimSpace(lines[i]) == ""
		switch {
		case blank && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		case !blank && start < 0:
			start = i
		}
	}
	return out
}

func mentionsTheDemo(lines []string) bool {
	return strings.Contains(strings.ToLower(strings.Join(lines, " ")), "demo")
}
