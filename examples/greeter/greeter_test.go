package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cache "github.com/regcache/cache"
)

// The tests build the program and run it as a user does, as child
// processes on loopback, and read what it prints and what it serves. Each
// wait is for a condition, up to deadline, which only a stuck program
// reaches.
const deadline = 2 * time.Minute

// A call's answer, as the client prints it.
var answer = regexp.MustCompile(`^\d\d:\d\d:\d\d Hello, regcache! \(from greeter at 127\.0\.0\.1:\d+\)$`)

// TestOneProcess runs etcd, the service and the client in one process, as
// `go run ./greeter` does: the calls succeed, the status page lists the
// greeter, /metrics has regcache's metrics, and with etcd stopped the
// calls go on from the cache until etcd is back. No call fails.
func TestOneProcess(t *testing.T) {
	p := start(t, "-http", "127.0.0.1:0", "-every", "100ms", "-ttl", "1s")
	dataDir := p.waitLine(t, `^etcd: started in this program on 127\.0\.0\.1:\d+ \(data in (.+)\)$`)[1]
	t.Cleanup(func() { p.stop(t); os.RemoveAll(dataDir) }) // if the program could not
	server := p.waitLine(t, `^server: greeter on (127\.0\.0\.1:\d+), registered in etcd at 127\.0\.0\.1:\d+$`)[1]
	page := p.waitLine(t, `^client: status page (http://127\.0\.0\.1:\d+/\S+)$`)[1]
	metrics := p.waitLine(t, `^client: metrics +(http://127\.0\.0\.1:\d+/metrics)$`)[1]
	p.waitAnswers(t, 3)

	checkStatusPage(t, p, page, server)
	checkMetrics(t, p, metrics)

	p.enter(t)
	p.waitLine(t, `^etcd: stopped`)
	checkServedFromCache(t, p, page)
	body := get(t, metrics)
	if down, stale := sum(t, body, "regcache_registry_down", ""), sum(t, body, "regcache_lookups_total", `result="stale"`); down != 1 || stale == 0 {
		t.Errorf("with etcd stopped, /metrics has regcache_registry_down %v and %v stale lookups, want 1 and some; its regcache_ lines:\n%s", down, stale, regcacheLines(body))
	}

	p.enter(t)
	p.waitLine(t, `^etcd: started again$`)
	waitStatus(t, page, "the registry held up again", func(st *statusJSON) bool { return !st.Cache.RegistryDown })
	p.waitAnswers(t, p.answers()+3)

	p.stop(t)
	p.checkNoFailedCall(t)
	checkRemoved(t, dataDir)
}

// TestTwoProcesses runs the service (with its etcd) and the client as two
// programs, as in two terminals, and stops etcd: the client goes on from
// its cache, and both programs end cleanly with etcd down.
func TestTwoProcesses(t *testing.T) {
	srv := start(t, "-mode", "server")
	dataDir := srv.waitLine(t, `^etcd: started in this program on 127\.0\.0\.1:\d+ \(data in (.+)\)$`)[1]
	t.Cleanup(func() { srv.stop(t); os.RemoveAll(dataDir) }) // if the program could not
	etcdAddr := srv.waitLine(t, `^etcd: run the client with: go run \./greeter -mode client -etcd (127\.0\.0\.1:\d+)$`)[1]
	server := srv.waitLine(t, `^server: greeter on (127\.0\.0\.1:\d+), registered in etcd at `)[1]

	cl := start(t, "-mode", "client", "-etcd", etcdAddr, "-http", "127.0.0.1:0", "-every", "100ms", "-ttl", "1s")
	page := cl.waitLine(t, `^client: status page (http://127\.0\.0\.1:\d+/\S+)$`)[1]
	cl.waitAnswers(t, 3)
	checkStatusPage(t, cl, page, server)

	srv.enter(t)
	srv.waitLine(t, `^etcd: stopped`)
	checkServedFromCache(t, cl, page)

	cl.stop(t)
	srv.stop(t)
	cl.checkNoFailedCall(t)
	checkRemoved(t, dataDir)
}

// checkRemoved fails t if etcd's data directory is left.
func checkRemoved(t *testing.T, dataDir string) {
	t.Helper()
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etcd's data directory %s is left after the program ended (Stat: %v)", dataDir, err)
	}
}

// checkStatusPage checks that the status page answers 200, in HTML and in
// JSON, lists the greeter at the server's address, and reads the cache and
// the selector that the client's calls go through: they have counted at
// least the calls answered before it was read.
func checkStatusPage(t *testing.T, p *program, page, server string) {
	t.Helper()
	if body := get(t, page); !strings.Contains(body, "greeter") {
		t.Errorf("the status page %s does not name the greeter:\n%s", page, body)
	}
	waitStatus(t, page, "the greeter listed at "+server, func(st *statusJSON) bool {
		for _, s := range st.Services {
			if s.Name == "greeter" && slices.ContainsFunc(s.NodeList, func(n cache.NodeStats) bool { return n.Address == server }) {
				return true
			}
		}
		return false
	})
	answered := p.answers()
	st := status(t, page)
	if st.Cache.Lookups < uint64(answered) {
		t.Errorf("the status page counts %d lookups, after %d calls answered: not the client's cache", st.Cache.Lookups, answered)
	}
	if len(st.Selectors) != 1 || st.Selectors[0].Name != "regcache" || !st.Selectors[0].Available {
		t.Errorf("the status page's selectors are %+v, not the client's one regcache selector", st.Selectors)
	}
}

// checkMetrics checks that /metrics has regcache's metrics, those the
// README names among them, of the cache that the client's calls go
// through.
func checkMetrics(t *testing.T, p *program, url string) {
	t.Helper()
	answered := p.answers()
	body := get(t, url)
	for _, name := range append(readmeMetrics(t), "regcache_selector_ejected_nodes") {
		if !regexp.MustCompile(`(?m)^` + name + `\b`).MatchString(body) {
			t.Errorf("/metrics has no %s; its regcache_ lines:\n%s", name, regcacheLines(body))
		}
	}
	if n := sum(t, body, "regcache_lookups_total", ""); n < float64(answered) {
		t.Errorf("/metrics counts %v lookups, after %d calls answered: not the client's cache; its regcache_ lines:\n%s", n, answered, regcacheLines(body))
	}
}

// sum adds up the samples of the metric name whose labels include label
// ("" for all of them).
func sum(t *testing.T, metrics, name, label string) float64 {
	t.Helper()
	total := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+name+`(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(metrics, -1) {
		if !strings.Contains(m[1], label) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("/metrics: %s: %v", m[0], err)
		}
		total += v
	}
	return total
}

func regcacheLines(metrics string) string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "regcache_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkServedFromCache waits, etcd being stopped, until the status page
// shows etcd down and stale data served, then for more answers.
func checkServedFromCache(t *testing.T, p *program, page string) {
	t.Helper()
	waitStatus(t, page, "etcd held down and stale data served", func(st *statusJSON) bool {
		return st.Cache.RegistryDown && st.Cache.StaleServes > 0
	})
	p.waitAnswers(t, p.answers()+5)
}

// waitStatus reads the status page as JSON until cond holds.
func waitStatus(t *testing.T, page, what string, cond func(*statusJSON) bool) {
	t.Helper()
	var last *statusJSON
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for end := time.Now().Add(deadline); time.Now().Before(end); <-poll.C {
		if last = status(t, page); cond(last) {
			return
		}
	}
	t.Fatalf("the status page never showed %s; last: %+v", what, last)
}

// statusJSON is the status page's JSON, as far as the tests read it.
type statusJSON struct {
	Cache     cache.Stats          `json:"cache"`
	Services  []cache.ServiceStats `json:"services"`
	Selectors []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
	} `json:"selectors"`
}

// status reads the status page as JSON.
func status(t *testing.T, page string) *statusJSON {
	t.Helper()
	body := get(t, page+"?format=json")
	var st statusJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("the status page's JSON: %v\n%s", err, body)
	}
	return &st
}

// get fetches url and fails t unless it answers 200.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// A program is the greeter program running as a child process.
type program struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu    sync.Mutex
	lines []string      // what it printed so far
	grew  chan struct{} // closed, and replaced, at each line printed

	exited  chan struct{} // closed once it has ended and its output is read
	waitErr error         // how it ended, once exited is closed
	stopped sync.Once
}

// start starts the program with args. It is stopped at the end of the
// test, if the test has not stopped it.
func start(t *testing.T, args ...string) *program {
	t.Helper()
	p := &program{cmd: exec.Command(build(t), args...), grew: make(chan struct{}), exited: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	setParentDeathSignal(p.cmd.SysProcAttr)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for lines := bufio.NewScanner(pr); lines.Scan(); {
			p.mu.Lock()
			p.lines = append(p.lines, lines.Text())
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
		io.Copy(io.Discard, pr) // a line too long for the scanner
	}()
	go func() {
		p.waitErr = p.cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("greeter %s printed:\n%s", strings.Join(args, " "), strings.Join(p.output(), "\n"))
		}
	})
	return p
}

// stop interrupts the program, as Ctrl-C does, and fails t unless it ends
// within deadline with exit status 0.
func (p *program) stop(t *testing.T) {
	t.Helper()
	p.stopped.Do(func() {
		if runtime.GOOS == "windows" {
			p.cmd.Process.Kill()
		} else if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Errorf("interrupt: %v", err)
		}
		select {
		case <-p.exited:
			if p.waitErr != nil && runtime.GOOS != "windows" {
				t.Errorf("the program ended with %v after an interrupt, not with status 0", p.waitErr)
			}
		case <-time.After(deadline):
			p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("the program had not ended %v after an interrupt", deadline)
		}
	})
}

// enter presses Enter in the program's terminal.
func (p *program) enter(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "\n"); err != nil {
		t.Fatal(err)
	}
}

// output returns what the program printed so far.
func (p *program) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// waitFor waits until cond holds of what the program printed.
func (p *program) waitFor(t *testing.T, what string, cond func(lines []string) bool) {
	t.Helper()
	timeout := time.NewTimer(deadline)
	defer timeout.Stop()
	for {
		p.mu.Lock()
		ok, grew := cond(p.lines), p.grew
		p.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-grew:
		case <-p.exited:
			p.mu.Lock()
			ok = cond(p.lines)
			p.mu.Unlock()
			if !ok {
				t.Fatalf("the program ended (%v) before printing %s", p.waitErr, what)
			}
			return
		case <-timeout.C:
			t.Fatalf("the program did not print %s within %v", what, deadline)
		}
	}
}

// waitLine waits for a line that matches the regular expression re, and
// returns its submatches.
func (p *program) waitLine(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	p.waitFor(t, "a line matching "+re, func(lines []string) bool {
		for _, l := range lines {
			if m = rx.FindStringSubmatch(l); m != nil {
				return true
			}
		}
		return false
	})
	return m
}

// answers counts the answers printed so far.
func (p *program) answers() int { return countAnswers(p.output()) }

func countAnswers(lines []string) int {
	n := 0
	for _, l := range lines {
		if answer.MatchString(l) {
			n++
		}
	}
	return n
}

// waitAnswers waits until the program has printed n answers.
func (p *program) waitAnswers(t *testing.T, n int) {
	t.Helper()
	p.waitFor(t, fmt.Sprintf("%d answers", n), func(lines []string) bool { return countAnswers(lines) >= n })
}

// checkNoFailedCall fails t if a call of the program's client failed.
func (p *program) checkNoFailedCall(t *testing.T) {
	t.Helper()
	for _, l := range p.output() {
		if strings.Contains(l, "call failed") {
			t.Errorf("a call failed: %s", l)
		}
	}
}

// build builds the program once for the tests, with -race if they are.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		args := []string{"build", "-o", filepath.Join(binDir, "greeter")}
		if raceBuild {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "greeter")
}

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	var err error
	if binDir, err = os.MkdirTemp("", "regcache-greeter-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(binDir)
	os.Exit(code)
}
