package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	cache "github.com/regcache/cache"
)

func writeJSON(w http.ResponseWriter, r *http.Request, st *status) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		http.Error(w, "regcache/admin: "+err.Error(), http.StatusInternalServerError)
		return
	}
	out := escapeControls(buf.Bytes())
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(out)
	}
}

// escapeControls escapes the control characters that encoding/json leaves
// raw in json, DEL and the C1 controls (U+0080 to U+009F: CSI, OSC, NEL
// among them), as it escapes the C0 ones: \u009b. The JSON then holds no
// control character, so it runs no escape sequence in a terminal, and
// still decodes to the exact strings. encoding/json writes valid UTF-8 (a
// byte that is not UTF-8 becomes \ufffd), in which 0xC2 followed by 0x80
// to 0x9F is always a C1 control.
func escapeControls(json []byte) []byte {
	const hex = "0123456789abcdef"
	out := json[:0:0]
	start := 0
	for i := 0; i < len(json); i++ {
		var c byte
		switch b := json[i]; {
		case b == 0x7f:
			c = b
		case b == 0xc2 && i+1 < len(json) && json[i+1] >= 0x80 && json[i+1] <= 0x9f:
			c = json[i+1]
		default:
			continue
		}
		out = append(out, json[start:i]...)
		out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		if c >= 0x80 {
			i++
		}
		start = i + 1
	}
	if start == 0 {
		return json
	}
	return append(out, json[start:]...)
}

func writeHTML(w http.ResponseWriter, r *http.Request, st *status) {
	var buf bytes.Buffer
	if err := page.Execute(&buf, view{st}); err != nil {
		http.Error(w, "regcache/admin: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page runs no script and loads nothing: registry data that
	// slipped through escaping could not run either.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
	out := visibleControls(buf.Bytes())
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(out)
	}
}

// visibleControls makes visible, in page, the control characters and the
// bytes that are not UTF-8, which come only from the registry's data (the
// template has no control character but newlines and tabs): C0 controls
// and DEL become their Unicode pictures (ESC becomes ␛), C1 controls
// (U+0080 to U+009F), which have none, and bytes that are not UTF-8 become
// U+FFFD. A page fetched into a terminal then runs no escape sequence, it
// is the UTF-8 it says it is, and the reader sees that something was
// there.
func visibleControls(page []byte) []byte {
	out := page[:0:0]
	start := 0
	for i := 0; i < len(page); {
		b := page[i]
		size := 1
		var pic rune
		switch {
		case b == '\n' || b == '\t' || b >= 0x20 && b < 0x7f:
			i++
			continue
		case b < 0x20:
			pic = 0x2400 + rune(b)
		case b == 0x7f:
			pic = 0x2421
		default:
			var r rune
			r, size = utf8.DecodeRune(page[i:])
			if r != utf8.RuneError && r > 0x9f || size > 1 && r == utf8.RuneError {
				i += size // printable, or U+FFFD itself
				continue
			}
			pic = utf8.RuneError
		}
		out = append(out, page[start:i]...)
		out = utf8.AppendRune(out, pic)
		i += size
		start = i
	}
	if start == 0 {
		return page
	}
	return append(out, page[start:]...)
}

// view is the page's data, with what the template computes from it.
type view struct{ *status }

// NextURL is the query of the next page.
func (v view) NextURL() string {
	q := url.Values{}
	if v.Prefix != "" {
		q.Set("prefix", v.Prefix)
	}
	if v.Limit != defaultLimit {
		q.Set("limit", strconv.Itoa(v.Limit))
	}
	q.Set("after", v.Next)
	return "?" + q.Encode()
}

// JSONURL is the query of this page as JSON.
func (v view) JSONURL() string {
	q := url.Values{"format": {"json"}}
	if v.Prefix != "" {
		q.Set("prefix", v.Prefix)
	}
	if v.After != "" {
		q.Set("after", v.After)
	}
	if v.Limit != defaultLimit {
		q.Set("limit", strconv.Itoa(v.Limit))
	}
	return "?" + q.Encode()
}

// In is how long from the page's time until t: "in 3.2s", or "now".
func (v view) In(t time.Time) string {
	d := t.Sub(v.Time)
	if d <= 0 {
		return "now"
	}
	return "in " + round(d).String()
}

// Ago is how long before the page's time t was.
func (v view) Ago(t time.Time) string {
	return round(v.Time.Sub(t)).String() + " ago"
}

// Returns is when an ejected node returns, from the time left.
func (v view) Returns(remaining time.Duration) time.Time {
	return v.Time.Add(remaining)
}

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur":       func(d time.Duration) string { return round(d).String() },
	"clock":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
	"freshness": freshness,
	// cls turns a state into a CSS class: "not started" into
	// "not-started".
	"cls": func(s any) string { return strings.ReplaceAll(fmt.Sprint(s), " ", "-") },
	// key is a row's name as ?after= takes it: its bytes, percent-encoded,
	// where the page shows invalid bytes and controls alike.
	"key":    url.QueryEscape,
	"quoted": quoted,
}).Parse(pageHTML))

// freshness is how fresh the service's data is: "fresh", "unconfirmed"
// (nodes an event announced, not yet confirmed by a refresh, served
// without counting as stale), "stale", or "no data" (a lookup failed, was
// throttled or found nothing).
func freshness(s cache.ServiceStats) string {
	switch {
	case s.Source == "":
		return "no data"
	case s.Fresh:
		return "fresh"
	case s.Unconfirmed:
		return "unconfirmed"
	default:
		return "stale"
	}
}

// quoted is name as a Go string literal, if name holds what the page
// cannot show as itself: a byte that is not UTF-8, a control character or
// another rune that does not print (U+200B). Such names would look like
// others ("inv\xfea" as "inv\ufffda"); the quoted form tells them apart.
// Empty for a name that the page shows as it is.
func quoted(name string) string {
	for i, r := range name {
		if r == utf8.RuneError && !strings.HasPrefix(name[i:], "\ufffd") || !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return ""
}

// round shows a duration to the millisecond, or to the second past a
// minute.
func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>regcache status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em; } h2 { font-size: 1.15em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
code, .mono { font-family: ui-monospace, monospace; font-size: 13px; }
.state { display: inline-block; padding: 1px 8px; border-radius: 3px; font-weight: 600; }
.up, .fresh, .connected { background: #d7f5dd; } .down, .stale, .reconnecting { background: #fbd5d5; }
.unconfirmed, .no-data, .not-started, .stopped { background: #fdf0c4; }
.muted { color: #777; } .err { color: #a40000; }
ul.nodes { margin: 0; padding-left: 1em; }
</style>
</head>
<body>
<h1>regcache status</h1>
<p class="muted">Read at <span id="time">{{clock .Time}}</span>. <a href="{{.JSONURL}}">This page as JSON</a>.</p>

<table id="summary">
{{with .Cache}}<tr><th>Registry</th><td id="registry">{{if .RegistryDown}}<span class="state down">down</span> since {{clock .RegistryDownSince}} ({{$.Ago .RegistryDownSince}}): <span class="err">{{.RegistryError}}</span>; serving cached data, one probe per interval{{else}}<span class="state up">up</span>{{end}}</td></tr>
<tr><th>Outages</th><td id="outages">{{.Outages}}, {{dur .DownTime}} down in all</td></tr>
<tr><th>Watch stream</th><td id="stream"><span class="state {{cls .Stream}}">{{.Stream}}</span>{{if not .StreamSince.IsZero}} since {{clock .StreamSince}}{{end}}</td></tr>
<tr><th>Lookups</th><td id="counters">{{.Lookups}}: {{.FreshHits}} fresh, {{.EventServes}} from events not yet confirmed, {{.StaleServes}} stale, {{.Throttled}} throttled, {{.Misses}} waited for the registry, {{.Invalid}} empty names; {{.Refreshes}} refreshes, {{.RefreshErrors}} failed; {{.Entries}} services held; stale data served now {{dur .StaleServedAge}} old</td></tr>
{{if .SnapshotError}}<tr><th>Snapshot</th><td id="snapshot" class="err">{{.SnapshotError}}</td></tr>{{end}}{{end}}
</table>

<h2>Services</h2>
<form method="get">
<label>Name starts with <input name="prefix" value="{{.Prefix}}"></label>
<label>per page <input name="limit" size="5" value="{{.Limit}}"></label>
<button type="submit">Show</button>
</form>
<table id="services">
<thead><tr><th>Service</th><th>Freshness</th><th>Source</th><th>Age</th><th>Nodes</th><th>Last error</th><th>Retry window closes</th></tr></thead>
<tbody>
{{range .Services}}<tr class="service" data-key="{{key .Name}}" data-name="{{.Name}}">
<td class="name mono">{{.Name}}{{with quoted .Name}} <span class="muted quoted">{{.}}</span>{{end}}</td>
<td class="freshness">{{with freshness .}}<span class="state {{cls .}}">{{.}}</span>{{end}}{{if .Refreshing}} <span class="muted">refreshing</span>{{end}}</td>
<td class="source">{{.Source}}</td>
<td class="age">{{if .Source}}{{dur .Age}}{{end}}</td>
<td class="nodes">{{if .NodeList}}<ul class="nodes">{{range .NodeList}}<li class="node"><span class="mono">{{.Id}}</span> <span class="mono">{{.Address}}</span> <span class="muted">v{{.Version}}</span>{{range $k, $v := .Metadata}} <span class="meta mono">{{$k}}={{$v}}</span>{{end}}</li>{{end}}</ul>{{else}}<span class="muted">none</span>{{end}}</td>
<td class="error">{{if .LastError}}<span class="err">{{.LastError}}</span>{{if not .LastErrorAt.IsZero}}<br><span class="muted">at {{clock .LastErrorAt}}</span>{{end}}{{if gt .Failures 1}} <span class="muted">({{.Failures}} in a row)</span>{{end}}{{end}}</td>
<td class="retry">{{if not .RetryAt.IsZero}}{{$.In .RetryAt}}<br><span class="muted">at {{clock .RetryAt}}</span>{{else}}<span class="muted">open now</span>{{end}}</td>
</tr>
{{else}}<tr><td colspan="7" class="muted">No service{{if .Prefix}} starts with “{{.Prefix}}”{{end}}.</td></tr>
{{end}}</tbody>
</table>
{{if .Next}}<p><a id="next" href="{{.NextURL}}">Next page, after {{.Next}}</a></p>{{end}}

<h2>Ejected nodes</h2>
{{range .Selectors}}<h3>Selector <span class="mono">{{.Name}}</span></h3>
{{if not .Available}}<p class="muted">This selector does not report its passive health.</p>
{{else}}<p class="muted">{{.Failures}} failures to reach a node, {{.Ejections}} ejections so far.</p>
<table class="ejected">
<thead><tr><th>Service</th><th>Node</th><th>Address</th><th>Ejections in a row</th><th>Reason</th><th>Returns</th></tr></thead>
<tbody>
{{range .Ejected}}<tr class="ejected-node" data-service="{{.Service}}" data-id="{{.Id}}">
<td class="mono">{{.Service}}</td><td class="mono">{{.Id}}</td><td class="mono">{{.Address}}</td><td>{{.Ejections}}</td>
<td class="reason err">{{.Reason}}</td><td class="returns">in {{dur .Remaining}}, at {{clock ($.Returns .Remaining)}}</td>
</tr>
{{else}}<tr><td colspan="6" class="muted">None.</td></tr>
{{end}}</tbody>
</table>
{{end}}{{else}}<p class="muted">No selector was given to the page.</p>
{{end}}
</body>
</html>
`
