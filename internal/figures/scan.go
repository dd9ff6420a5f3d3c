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

// figureOfARun says where the figure of a run that starts with n ends in
// line, if n reads as one: a count followed by what the demo counts (427
// registry calls, 50 failed, 0 of 1 199 RPCs), or trials of a test (20 of
// 20 trials). The calls the registry takes at a time are a setting.
func figureOfARun(line string, n number) (end int, ok bool) {
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
			for _, what := range []string{"RPCs", "trials"} {
				if m.start == 0 && m.kind == "count" && strings.HasPrefix(after, what) {
					return len(line) - len(after) + len(what), true
				}
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

// outside reports the figures of runs that a document types outside the
// marked blocks: a number equal to a measured figure that a block shows
// (to its three significant digits, when it has at least three, so that
// settings such as 5 s or 200 ms do not count), or a count of what the
// demo counts or of a test's trials. mode says what of the document is
// read; subjects, what a paragraph names to be read in readSubjects.
func outside(path, text string, blocks []markedBlock, shown map[string]figure, mode readMode, subjects []string) []string {
	var problems []string
	lines := strings.Split(visible(text, blocks), "\n")
	raw := strings.Split(text, "\n")
	held := sectionsHolding(raw, blocks)
	for _, para := range paragraphs(raw) {
		switch {
		case mode == readSubjects && !mentions(raw[para[0]:para[1]], subjects):
			continue
		case mode == readSections && !held[para[0]]:
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
				} else if end, ok := figureOfARun(line, n); ok {
					read = end
					problems = append(problems, fmt.Sprintf("%s:%d: %q reads as a measured figure, typed outside a marked block",
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

// mentions says whether lines name one of subjects, the demo in any case.
func mentions(lines []string, subjects []string) bool {
	text := strings.Join(lines, " ")
	for _, s := range subjects {
		if strings.Contains(text, s) || strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// sectionsHolding says, by line index, which lines are in a section that
// holds a marked block: from the heading (#, ##, ...) nearest above the
// block to the next heading of its level or above.
func sectionsHolding(lines []string, blocks []markedBlock) []bool {
	held := make([]bool, len(lines)+1)
	type section struct{ level, start int }
	var open []section
	level := func(line string) int {
		n := len(line) - len(strings.TrimLeft(line, "#"))
		if n == 0 || n == len(line) || line[n] != ' ' {
			return 0
		}
		return n
	}
	blockAt := map[int]bool{}
	for _, b := range blocks {
		blockAt[b.line-1] = true
	}
	mark := func(s section, end int) {
		for i := s.start; i < end; i++ {
			held[i] = true
		}
	}
	var withBlock []bool // for each open section, whether a block opens in it
	fenced := false
	for i := 0; i <= len(lines); i++ {
		l := 0
		if i == len(lines) {
			l = 1 // the end closes every section
		} else {
			if strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
				fenced = !fenced
			}
			if !fenced {
				l = level(lines[i])
			}
		}
		if l > 0 {
			for len(open) > 0 && open[len(open)-1].level >= l {
				if withBlock[len(open)-1] {
					mark(open[len(open)-1], i)
				}
				open, withBlock = open[:len(open)-1], withBlock[:len(withBlock)-1]
			}
			if i < len(lines) {
				open, withBlock = append(open, section{l, i}), append(withBlock, false)
			}
		}
		if blockAt[i] && len(withBlock) > 0 {
			withBlock[len(withBlock)-1] = true // the innermost section
		}
	}
	return held
}
