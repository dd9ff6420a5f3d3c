// Package browsertest loads the admin status page in a real headless
// Chromium. It is a module of its own: chromedp needs Go 1.25, which the
// library and its other test modules do not.
package browsertest

import (
	"context"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	merrors "go-micro.dev/v4/errors"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"

	cache "github.com/regcache/cache"
	"github.com/regcache/cache/admin"
)

const evil = "<script>alert(1)</script>"

// chromium returns the browser's path. Without one the test fails in CI,
// where .ci/run installs Debian's chromium package, and is skipped
// elsewhere.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no headless browser: install Debian's chromium package (apt-get install -y chromium); .ci/run does")
	}
	t.Skip("no chromium on the PATH (apt-get install -y chromium); the browser test runs in CI")
	return ""
}

// state is a cache over go-micro's memory registry in a known state: a
// service named like markup, with markup in its metadata; "greeter", one of
// whose two nodes the selector ejected; and "orders", registered after a
// lookup found nothing, so served from its create event, unconfirmed.
func state(t *testing.T) (cache.Cache, *httptest.Server) {
	reg := registry.NewMemoryRegistry()
	must := func(err error) { t.Helper(); require.NoError(t, err) }
	must(reg.Register(&registry.Service{Name: evil, Version: "1", Nodes: []*registry.Node{
		{Id: "x-1", Address: "10.0.0.9:9001", Metadata: map[string]string{"note": `<img src=x onerror="alert(2)">`}},
	}}))
	must(reg.Register(&registry.Service{Name: "greeter", Version: "2", Nodes: []*registry.Node{
		{Id: "greeter-1", Address: "10.0.0.7:8080", Metadata: map[string]string{"zone": "eu-1"}},
		{Id: "greeter-2", Address: "10.0.0.8:8080", Metadata: map[string]string{"zone": "eu-2"}},
	}}))
	quiet := logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	c := cache.New(slowKey{reg}, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for _, name := range []string{evil, "greeter"} {
		_, err := c.GetService(name)
		must(err)
	}
	_, err := c.GetService("payments")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = c.GetService("orders")
	require.ErrorIs(t, err, registry.ErrNotFound)
	for c.Stats().Stream != cache.StreamConnected {
		time.Sleep(time.Millisecond)
	}
	must(reg.Register(&registry.Service{Name: "orders", Version: "1", Nodes: []*registry.Node{
		{Id: "orders-1", Address: "10.0.0.11:8080"},
	}}))
	for {
		if rows := c.Services("orders", "", 1); len(rows) == 1 && rows[0].Nodes == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}

	sel := cache.NewSelector(c)
	svcs, err := c.GetService("greeter")
	must(err)
	var dead *registry.Node
	for _, n := range svcs[0].Nodes {
		if n.Id == "greeter-1" {
			dead = n
		}
	}
	refused := merrors.InternalServerError("go.micro.client", "connection error: dial tcp 10.0.0.7:8080: connect: connection refused")
	for i := 0; i < 3; i++ {
		sel.Mark("greeter", dead, refused)
	}
	// httptest serves on 127.0.0.1 only.
	srv := httptest.NewServer(admin.Handler(c, sel))
	t.Cleanup(srv.Close)
	return c, srv
}

// slowKey is a registry whose key for "payments" times out.
type slowKey struct{ registry.Registry }

func (r slowKey) GetService(name string, opts ...registry.GetOption) ([]*registry.Service, error) {
	if name == "payments" {
		return nil, context.DeadlineExceeded
	}
	return r.Registry.GetService(name, opts...)
}

// browser starts a headless Chromium for t, and returns how to run
// actions in it and evaluate JavaScript, each step with a limit of its
// own, so that a hung browser fails the test instead of hanging it.
func browser(t *testing.T) (step func() context.Context, do func(...chromedp.Action[chromedp.Void]), eval func(js string) string) {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// Start the browser on the context that lives as long as it.
	require.NoError(t, chromedp.Do(ctx))
	step = func() context.Context {
		sctx, stop := context.WithTimeout(ctx, time.Minute)
		t.Cleanup(stop)
		return sctx
	}
	do = func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(step(), actions...))
	}
	eval = func(js string) string {
		t.Helper()
		v, err := chromedp.Run(step(), chromedp.Evaluate[string](js))
		require.NoError(t, err, js)
		return v
	}
	return step, do, eval
}

func TestStatusPageInChromium(t *testing.T) {
	step, do, eval := browser(t)
	_, srv := state(t)

	do(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible("#services"))

	// The service named like markup is text: no script, no image made.
	assert.Equal(t, "0", eval(`String(document.scripts.length)`))
	assert.Equal(t, "0", eval(`String(document.images.length)`))
	names := eval(`Array.from(document.querySelectorAll("tr.service td.name")).map(td => td.textContent).join("\n")`)
	assert.Equal(t, strings.Join([]string{evil, "greeter", "orders", "payments"}, "\n"), names)
	assert.Equal(t, `note=<img src=x onerror="alert(2)">`,
		eval(`document.querySelector("tr.service .meta").textContent`))

	// The registry's and the stream's state.
	assert.True(t, strings.HasPrefix(eval(`document.getElementById("registry").textContent`), "up"))
	assert.Contains(t, eval(`document.getElementById("stream").textContent`), "connected since")
	assert.Contains(t, eval(`document.getElementById("outages").textContent`), "0,")

	// Rows: freshness and source.
	row := func(name, cell string) string {
		return eval(`document.querySelector('tr.service[data-name="` + name + `"] td.` + cell + `').textContent.trim()`)
	}
	assert.Equal(t, "fresh", row("greeter", "freshness .state"))
	assert.Equal(t, "refresh", row("greeter", "source"))
	assert.Equal(t, "unconfirmed", row("orders", "freshness .state"))
	assert.Equal(t, "event", row("orders", "source"))
	assert.Contains(t, row("greeter", "nodes"), "greeter-2 10.0.0.8:8080 v2 zone=eu-2")
	assert.Equal(t, "no data", row("payments", "freshness .state"))
	assert.Contains(t, row("payments", "error"), "context deadline exceeded")
	assert.Regexp(t, `^in [0-9.]+m?s`, row("payments", "retry"))

	// The ejected node, with its reason and when it returns.
	ejected := eval(`Array.from(document.querySelectorAll("tr.ejected-node")).map(tr => tr.dataset.service + "/" + tr.dataset.id + ": " + tr.querySelector(".reason").textContent + " | " + tr.querySelector(".returns").textContent).join("\n")`)
	assert.Regexp(t, `^greeter/greeter-1: .*connection refused.* \| in [0-9.]+m?s, at 20`, ejected)

	png, err := chromedp.Run(step(), chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.True(t, len(png) > 8 && string(png[1:4]) == "PNG", "a PNG")
	out := filepath.Join(t.TempDir(), "admin.png")
	if dst := os.Getenv("REGCACHE_SCREENSHOT"); dst != "" {
		out = dst // docs/admin.png: REGCACHE_SCREENSHOT=$PWD/../../docs/admin.png go test .
	}
	require.NoError(t, os.WriteFile(out, png, 0o644))
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
}

// Clicking "Next page" from the first page to the last lists every
// service once, also services whose names differ only in bytes that are
// not UTF-8 or in control characters, which the page shows alike: the
// link's after, and each row's data-key, are the name's own bytes.
func TestNextLinksReachEveryService(t *testing.T) {
	_, do, eval := browser(t)
	names := []string{"a", "inv\xfea", "inv\xffa", "inv\ufffda", "inv\x01a", "inv\u2401a", "z"}
	reg := registry.NewMemoryRegistry()
	for i, n := range names {
		require.NoError(t, reg.Register(&registry.Service{Name: n, Version: "1", Nodes: []*registry.Node{{Id: strconv.Itoa(i), Address: "10.0.0.1:1"}}}))
	}
	quiet := logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
	c := cache.New(reg, cache.WithLogger(quiet))
	t.Cleanup(c.Stop)
	for _, n := range names {
		_, err := c.GetService(n)
		require.NoError(t, err)
	}
	srv := httptest.NewServer(admin.Handler(c))
	t.Cleanup(srv.Close)

	var got []string
	do(chromedp.Navigate(srv.URL+"/?limit=2"), chromedp.WaitVisible("#services"))
	for range names {
		keys := eval(`Array.from(document.querySelectorAll("tr.service")).map(tr => tr.dataset.key).join("\n")`)
		for _, k := range strings.Split(keys, "\n") {
			name, err := url.QueryUnescape(k)
			require.NoError(t, err, k)
			got = append(got, name)
		}
		if eval(`String(document.getElementById("next") !== null)`) == "false" {
			break
		}
		before := eval(`location.href`)
		do(chromedp.Click("#next"), chromedp.WaitVisible("#services"))
		require.NotEqual(t, before, eval(`location.href`), "the link went somewhere")
	}
	want := slices.Clone(names)
	slices.Sort(want)
	assert.Equal(t, want, got, "every service once, in order, clicking Next page")
}
