package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	cache "github.com/regcache/cache"
)

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // MICRO_REGISTRY_ADDRESS
		want config
		err  error
	}{
		{args: nil, want: config{mode: "all", http: "127.0.0.1:8080", every: time.Second, ttl: cache.DefaultTTL}},
		{args: strings.Fields("-mode server -etcd 10.0.0.1:2379 -http 127.0.0.1:0 -every 100ms -ttl 5s"),
			want: config{mode: "server", etcd: "10.0.0.1:2379", http: "127.0.0.1:0", every: 100 * time.Millisecond, ttl: 5 * time.Second}},
		{args: strings.Fields("-mode client"), env: "10.0.0.2:2379",
			want: config{mode: "client", etcd: "10.0.0.2:2379", http: "127.0.0.1:8080", every: time.Second, ttl: cache.DefaultTTL}},
		{args: strings.Fields("-mode client -etcd 10.0.0.3:2379"), env: "10.0.0.2:2379",
			want: config{mode: "client", etcd: "10.0.0.3:2379", http: "127.0.0.1:8080", every: time.Second, ttl: cache.DefaultTTL}},
		{args: strings.Fields("-mode client"), err: errUsage},
		{args: strings.Fields("-mode gateway"), err: errUsage},
		{args: strings.Fields("-every 0s"), err: errUsage},
		{args: strings.Fields("-ttl -1s"), err: errUsage},
		{args: strings.Fields("-ttl 0s"), err: errUsage},
		{args: strings.Fields("-nosuchflag"), err: errUsage},
		{args: strings.Fields("server"), err: errUsage},
		{args: strings.Fields("-h"), err: flag.ErrHelp},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("MICRO_REGISTRY_ADDRESS", tc.env)
			got, err := parseFlags(tc.args, io.Discard)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
