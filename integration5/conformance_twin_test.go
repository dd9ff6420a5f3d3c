package integration5

import (
	"os"
	"strings"
	"testing"
)

// twinOf is a test file of integration turned into this module's: the
// suites written once, for go-micro v4, of which only the package and
// imports change for v5.
func twinOf(v4 string) string {
	return strings.NewReplacer(
		"package integration\n", "package integration5\n",
		`"go-micro.dev/v4/`, `"go-micro.dev/v5/`,
		`cache "github.com/regcache/cache"`, `cache "github.com/regcache/cache/gomicro5"`,
		`lossless "github.com/regcache/cache/etcd"`, `lossless "github.com/regcache/cache/gomicro5/etcd"`,
		`"github.com/regcache/cache/gomicro"`, `"github.com/regcache/cache/gomicro5/gomicro"`,
		`"go-micro.dev/v4"`, `"go-micro.dev/v5"`,
	).Replace(v4)
}

// twins are the test files of this module that are integration's with
// their imports changed: the conformance suite, the tests of the etcd
// module on the deployments users run (auth, gRPC proxy), the NATS
// restart and the writing of its figures, the drop-in suite with its
// Consul agent, the tests of a cache's convergence over the etcd module
// after races, blips and outages, the mass loss through go-micro RPC, and
// the etcd and NATS servers that the tests start as child processes.
var twins = []string{"conformance_test.go", "deployments_test.go", "natsrestart_test.go", "figures_test.go", "dropin_test.go", "consulapi_test.go", "etcdconverge_test.go", "massloss_test.go", "servers_test.go", "pdeathsig_linux_test.go", "pdeathsig_other_test.go"}

// TestConformanceIsTheTwin fails when a twin here is not the v4 file with
// its imports changed; REGCACHE_IT_WRITE_TWIN=1 rewrites them.
func TestConformanceIsTheTwin(t *testing.T) {
	for _, name := range twins {
		v4, err := os.ReadFile("../integration/" + name)
		if err != nil {
			t.Fatalf("read the v4 file: %v", err)
		}
		want := twinOf(string(v4))
		if os.Getenv("REGCACHE_IT_WRITE_TWIN") == "1" {
			if err := os.WriteFile(name, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("read the v5 file: %v", err)
		}
		if string(got) != want {
			t.Errorf("integration5/%s is not integration/%s with v5 imports: run `REGCACHE_IT_WRITE_TWIN=1 go test -run TestConformanceIsTheTwin .` in integration5", name, name)
		}
	}
}
