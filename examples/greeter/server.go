package main

import (
	"context"
	"fmt"

	"go-micro.dev/v4"
	"go-micro.dev/v4/broker"
	"go-micro.dev/v4/client"
	"go-micro.dev/v4/registry"
	"go-micro.dev/v4/server"
)

// Request and Response are the messages of Greeter.Hello. go-micro's
// client and server send them as JSON, its default codec.
type (
	Request  struct{ Name string }
	Response struct{ Greeting string }
)

// Greeter is the service's handler.
type Greeter struct {
	srv server.Server
}

// Hello greets req.Name, and says which instance answered.
func (g *Greeter) Hello(_ context.Context, req *Request, rsp *Response) error {
	rsp.Greeting = fmt.Sprintf("Hello, %s! (from greeter at %s)", req.Name, g.srv.Options().Address)
	return nil
}

// runServer runs the greeter service, registered in reg, until ctx ends,
// then deregisters it. ready is called with its address once it serves.
func runServer(ctx context.Context, reg registry.Registry, ready func(addr string)) error {
	// A server, a client and a broker of the service's own, on loopback:
	// go-micro's default server listens on every interface, and its
	// default broker finds its peers by mdns, which multicasts.
	srv := server.NewServer(server.Address("127.0.0.1:0"))
	service := micro.NewService(
		micro.Server(srv),
		micro.Client(client.NewClient()),
		micro.Broker(broker.NewMemoryBroker()),
		micro.Name("greeter"),
		micro.Registry(reg), // the server registers itself in etcd: no cache here
		micro.Context(ctx),
		micro.AfterStart(func() error {
			ready(srv.Options().Address)
			return nil
		}),
	)
	if err := micro.RegisterHandler(srv, &Greeter{srv: srv}); err != nil {
		return err
	}
	return service.Run()
}
