package storm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/logger"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/server"
	"go-micro.dev/v4/transport"
)

// RPCService is the service of the client path: go-micro RPC servers in the
// demo's process, on loopback ports picked at run time.
const RPCService = "demo.greeter"

// rpcInstances is how many instances RPCService has; the last one is
// killed.
const rpcInstances = 3

// HelloRequest and HelloResponse go over go-micro's HTTP transport with its
// JSON codec.
type HelloRequest struct {
	Name string `json:"name"`
}

type HelloResponse struct {
	Greeting string `json:"greeting"`
	Server   string `json:"server"`
}

// Greeter is the handler of every instance.
type Greeter struct{ id string }

func (g *Greeter) Hello(_ context.Context, req *HelloRequest, rsp *HelloResponse) error {
	rsp.Greeting = "hello " + req.Name
	rsp.Server = g.id
	return nil
}

// quietLogger is the logger of the demo's go-micro servers and clients:
// they log every registration and failed attempt.
func quietLogger() logger.Logger {
	return logger.NewLogger(logger.WithLevel(logger.FatalLevel), logger.WithOutput(io.Discard))
}

// rpcServer is one instance of RPCService.
type rpcServer struct {
	srv  server.Server
	node string // its node Id, as go-micro names it: service-id
	addr string
}

// startRPCServer starts instance i of RPCService, with an Id of its own
// (go-micro's default Id is one per process), and registers it through b.
// Everything it uses is given explicitly: no go-micro default, so no
// mdns.
func startRPCServer(b Backend, i int) (*rpcServer, error) {
	id := strconv.Itoa(i + 1)
	reg := &serverRegistry{b: b}
	srv := server.NewServer(
		server.Name(RPCService),
		server.Id(id),
		server.Version("1.0.0"),
		server.Address("127.0.0.1:0"),
		server.Registry(reg),
		server.Broker(broker.NewMemoryBroker()),
		server.Transport(transport.NewHTTPTransport()),
		server.RegisterInterval(0), // registers once, at Start
		server.WithLogger(quietLogger()),
	)
	s := &rpcServer{srv: srv, node: RPCService + "-" + id}
	if err := srv.Handle(srv.NewHandler(&Greeter{id: s.node})); err != nil {
		return nil, fmt.Errorf("instance %s: %w", s.node, err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("instance %s: start: %w", s.node, err)
	}
	// go-micro's server logs a failed registration and serves on.
	if err := reg.result(); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("instance %s: register: %w", s.node, err)
	}
	s.addr = srv.Options().Address
	return s, nil
}

// stop stops the server: it waits for the requests it is serving, and
// closes its listener. It does not deregister (see serverRegistry): for the
// instance that is killed, as for a process that dies, its node stays in
// the registry and in every cache, and connections to it are refused.
func (s *rpcServer) stop() error { return s.srv.Stop() }

// serverRegistry is the registry an instance registers in: the backend,
// whose clients all see the registration. It never deregisters anything:
// the killed instance dies without a word, and the others run until the
// end of the run, with the registry down.
type serverRegistry struct {
	b Backend

	mu  sync.Mutex
	err error // of the last Register
	did bool  // a Register was made
}

var errServerOnly = errors.New("the demo's servers only register")

func (r *serverRegistry) Register(s *registry.Service, _ ...registry.RegisterOption) error {
	err := r.b.Register(s)
	r.mu.Lock()
	r.err, r.did = err, true
	r.mu.Unlock()
	return err
}

func (r *serverRegistry) result() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.did {
		return errors.New("the server did not register")
	}
	return r.err
}

func (r *serverRegistry) Deregister(*registry.Service, ...registry.DeregisterOption) error {
	return nil
}

func (r *serverRegistry) Init(...registry.Option) error { return nil }
func (r *serverRegistry) Options() registry.Options     { return registry.Options{} }
func (r *serverRegistry) String() string                { return "demo" }

func (r *serverRegistry) GetService(string, ...registry.GetOption) ([]*registry.Service, error) {
	return nil, errServerOnly
}

func (r *serverRegistry) ListServices(...registry.ListOption) ([]*registry.Service, error) {
	return nil, errServerOnly
}

func (r *serverRegistry) Watch(...registry.WatchOption) (registry.Watcher, error) {
	return nil, errServerOnly
}
