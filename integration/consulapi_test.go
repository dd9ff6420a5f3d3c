package integration

// A Consul agent's HTTP API, as far as go-micro's Consul registry uses it,
// for the drop-in suite (dropin_test.go): Consul's server cannot run here
// (README.md), so this answers the plugin's calls as Consul does, on a
// loopback port:
//
//   - GET  /v1/agent/host: the plugin's check that the agent answers;
//   - PUT  /v1/agent/service/register and /v1/agent/service/deregister/{id}:
//     a node is a service instance whose ID is the node's Id;
//   - PUT  /v1/agent/check/pass/{check} (and check/update): a TTL check,
//     critical until passed and again once its TTL has run out without a
//     pass, as Consul's are;
//   - GET  /v1/health/service/{name}: the instances with their checks,
//     as a blocking query (?index=N waits until the service changes past
//     N), which the plugin's watcher runs;
//   - GET  /v1/catalog/services and /v1/health/checks/{name}.
//
// Every response carries the headers a Consul client reads
// (X-Consul-Index, X-Consul-KnownLeader, X-Consul-LastContact). It keeps
// one node, and no ACL, namespace or datacenter. integration5 runs the
// same file.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// consulCheck and consulInstance are the JSON shapes of Consul's API.
type consulCheck struct {
	Node, CheckID, Name, Status, ServiceID, ServiceName string
}

type consulService struct {
	ID, Service, Address string
	Tags                 []string
	Port                 int
	Meta                 map[string]string
}

type consulEntry struct {
	Node struct {
		Node, Address string
	}
	Service consulService
	Checks  []consulCheck
}

// consulRegistration is the body of a register call.
type consulRegistration struct {
	ID, Name, Address string
	Tags              []string
	Port              int
	Meta              map[string]string
	Check             *struct {
		CheckID, TTL, Status string
	}
}

// consulInstance is one registered instance and its TTL check, if any.
type consulInstance struct {
	service consulService
	check   *consulCheck // nil: no check
	ttl     time.Duration
	expire  *time.Timer // turns the check critical once the TTL runs out
}

const consulNode = "regcache-test"

// consulAPI is the agent. Its mu guards everything below it.
type consulAPI struct {
	srv *httptest.Server

	mu        sync.Mutex
	index     uint64                     // the last change's
	changed   chan struct{}              // closed at every change
	instances map[string]*consulInstance // by instance ID
	modified  map[string]uint64          // by service name: the index of its last change
}

// startConsulAPI starts the agent on a loopback port; it stops when the
// test ends.
func startConsulAPI(t interface{ Cleanup(func()) }) *consulAPI {
	a := &consulAPI{index: 1, changed: make(chan struct{}), instances: map[string]*consulInstance{}, modified: map[string]uint64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent/host", func(w http.ResponseWriter, r *http.Request) { a.reply(w, 0, map[string]any{}) })
	mux.HandleFunc("PUT /v1/agent/service/register", a.register)
	mux.HandleFunc("PUT /v1/agent/service/deregister/{id}", a.deregister)
	mux.HandleFunc("PUT /v1/agent/check/pass/{check}", a.pass)
	mux.HandleFunc("PUT /v1/agent/check/update/{check}", a.pass)
	mux.HandleFunc("GET /v1/health/service/{name}", a.health)
	mux.HandleFunc("GET /v1/health/checks/{name}", a.checks)
	mux.HandleFunc("GET /v1/catalog/services", a.catalog)
	a.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		a.srv.CloseClientConnections()
		a.srv.Close()
		a.mu.Lock()
		for _, in := range a.instances {
			if in.expire != nil {
				in.expire.Stop()
			}
		}
		a.mu.Unlock()
	})
	return a
}

// Addr is the agent's host:port.
func (a *consulAPI) Addr() string { return strings.TrimPrefix(a.srv.URL, "http://") }

// changedLocked records a change of the service name: its index moves on,
// and every blocking query wakes to look again.
func (a *consulAPI) changedLocked(name string) {
	a.index++
	a.modified[name] = a.index
	close(a.changed)
	a.changed = make(chan struct{})
}

// reply writes v as JSON with the headers of a Consul response.
func (a *consulAPI) reply(w http.ResponseWriter, index uint64, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Consul-Index", strconv.FormatUint(max(index, 1), 10))
	h.Set("X-Consul-KnownLeader", "true")
	h.Set("X-Consul-LastContact", "0")
	json.NewEncoder(w).Encode(v)
}

func (a *consulAPI) register(w http.ResponseWriter, r *http.Request) {
	var reg consulRegistration
	if err := json.NewDecoder(r.Body).Decode(&reg); err != nil || reg.Name == "" {
		http.Error(w, "bad registration", http.StatusBadRequest)
		return
	}
	if reg.ID == "" {
		reg.ID = reg.Name
	}
	in := &consulInstance{service: consulService{ID: reg.ID, Service: reg.Name, Address: reg.Address, Tags: reg.Tags, Port: reg.Port, Meta: reg.Meta}}
	if c := reg.Check; c != nil && c.TTL != "" {
		ttl, err := time.ParseDuration(c.TTL)
		if err != nil {
			http.Error(w, "bad TTL", http.StatusBadRequest)
			return
		}
		id, status := c.CheckID, c.Status
		if id == "" {
			id = "service:" + reg.ID
		}
		if status == "" {
			status = "critical" // as Consul starts a TTL check
		}
		in.check = &consulCheck{Node: consulNode, CheckID: id, Name: "Service '" + reg.Name + "' check", Status: status, ServiceID: reg.ID, ServiceName: reg.Name}
		in.ttl = ttl
	}
	a.mu.Lock()
	if old := a.instances[reg.ID]; old != nil {
		if old.expire != nil {
			old.expire.Stop()
		}
		if old.service.Service != reg.Name {
			a.changedLocked(old.service.Service)
		}
	}
	a.instances[reg.ID] = in
	a.changedLocked(reg.Name)
	a.mu.Unlock()
	a.reply(w, 0, nil)
}

func (a *consulAPI) deregister(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.mu.Lock()
	in := a.instances[id]
	if in != nil {
		if in.expire != nil {
			in.expire.Stop()
		}
		delete(a.instances, id)
		a.changedLocked(in.service.Service)
	}
	a.mu.Unlock()
	if in == nil {
		http.Error(w, "Unknown service ID "+strconv.Quote(id), http.StatusNotFound)
		return
	}
	a.reply(w, 0, nil)
}

// pass passes a TTL check: passing until its TTL runs out again.
func (a *consulAPI) pass(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("check")
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, in := range a.instances {
		if in.check == nil || in.check.CheckID != id {
			continue
		}
		if in.expire != nil {
			in.expire.Stop()
		}
		a.setStatusLocked(in, "passing")
		in.expire = time.AfterFunc(in.ttl, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.instances[in.service.ID] == in {
				a.setStatusLocked(in, "critical")
			}
		})
		a.reply(w, 0, nil)
		return
	}
	http.Error(w, "Unknown check "+strconv.Quote(id), http.StatusNotFound)
}

func (a *consulAPI) setStatusLocked(in *consulInstance, status string) {
	if in.check.Status != status {
		in.check.Status = status
		a.changedLocked(in.service.Service)
	}
}

// fail makes the check of the instance id critical, as a failing health
// check does.
func (a *consulAPI) fail(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := a.instances[id]
	if in == nil || in.check == nil {
		return false
	}
	if in.expire != nil {
		in.expire.Stop()
	}
	a.setStatusLocked(in, "critical")
	return true
}

// health answers the instances of a service, each with its checks. With
// ?index=N it waits until the service has changed after N, for up to
// ?wait (5 min by default), as a Consul blocking query.
func (a *consulAPI) health(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	after, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	wait := 5 * time.Minute
	if d, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && d > 0 {
		wait = d
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		a.mu.Lock()
		index, changed := a.modified[name], a.changed
		if after == 0 || index > after {
			entries := []consulEntry{}
			for _, in := range a.instances {
				if in.service.Service != name {
					continue
				}
				var e consulEntry
				e.Node.Node, e.Node.Address = consulNode, "127.0.0.1"
				e.Service = in.service
				e.Checks = []consulCheck{{Node: consulNode, CheckID: "serfHealth", Name: "Serf Health Status", Status: "passing"}}
				if in.check != nil {
					e.Checks = append(e.Checks, *in.check)
				}
				entries = append(entries, e)
			}
			a.mu.Unlock()
			sort.Slice(entries, func(i, j int) bool { return entries[i].Service.ID < entries[j].Service.ID })
			a.reply(w, index, entries)
			return
		}
		a.mu.Unlock()
		select {
		case <-changed:
		case <-timeout.C:
			after = 0
		case <-r.Context().Done():
			return
		}
	}
}

func (a *consulAPI) checks(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a.mu.Lock()
	out := []consulCheck{}
	for _, in := range a.instances {
		if in.service.Service == name && in.check != nil {
			out = append(out, *in.check)
		}
	}
	index := a.modified[name]
	a.mu.Unlock()
	a.reply(w, index, out)
}

func (a *consulAPI) catalog(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	out := map[string][]string{}
	for _, in := range a.instances {
		out[in.service.Service] = append(out[in.service.Service], in.service.Tags...)
	}
	index := a.index
	a.mu.Unlock()
	a.reply(w, index, out)
}
