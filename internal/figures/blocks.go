package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A marked block is the text between <!-- figures:NAME --> and
// <!-- /figures -->. On lines of their own, the markers hold a block
// (a table), written with a blank line on each side so that Markdown
// sees the table alone; within a line, a figure in a sentence.
var (
	openMarker = regexp.MustCompile(`<!-- figures:([a-z0-9-]+) -->`)
	endMarker  = "<!-- /figures -->"
)

// markedBlock is one marked block of a document.
type markedBlock struct {
	name       string
	start, end int // the content, between the markers, as byte offsets
	line       int // of the opening marker, from 1
	inline     bool
}

// findBlocks returns the marked blocks of a document, in order.
func findBlocks(text string) ([]markedBlock, error) {
	var blocks []markedBlock
	at := 0
	for {
		m := openMarker.FindStringSubmatchIndex(text[at:])
		rest := text[at:]
		if m == nil {
			if i := strings.Index(rest, endMarker); i >= 0 {
				return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(text, at+i), endMarker)
			}
			return blocks, nil
		}
		if i := strings.Index(rest[:m[0]], endMarker); i >= 0 {
			return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(text, at+i), endMarker)
		}
		b := markedBlock{name: rest[m[2]:m[3]], start: at + m[1], line: lineOf(text, at+m[0])}
		n := strings.Index(text[b.start:], endMarker)
		if n < 0 {
			return nil, fmt.Errorf("line %d: block %s has no %s", b.line, b.name, endMarker)
		}
		b.end = b.start + n
		if o := openMarker.FindStringIndex(text[b.start:b.end]); o != nil {
			return nil, fmt.Errorf("line %d: block %s opens before %s closes at line %d", lineOf(text, b.start+o[0]), b.name, endMarker, lineOf(text, b.end))
		}
		b.inline = !strings.HasPrefix(text[b.start:b.end], "\n")
		blocks = append(blocks, b)
		at = b.end + len(endMarker)
	}
}

// content is what goes between a block's markers for the rendered body.
func (b markedBlock) content(body string) string {
	if b.inline {
		return body
	}
	return "\n\n" + body + "\n\n"
}

func lineOf(text string, offset int) int { return strings.Count(text[:offset], "\n") + 1 }
