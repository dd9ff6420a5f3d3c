package snapfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go-micro.dev/v4/registry"
)

// fileOf wraps JSON for the services array of one listed service.
func fileOf(services string) []byte {
	return []byte(`{"format":"regcache-snapshot","version":1,"written":"2026-11-29T11:00:00Z",` +
		`"services":[{"name":"x","refreshed":"2026-11-29T11:00:00Z","services":[` + services + `]}]}`)
}

func repeat(s string, n int) string {
	return strings.TrimSuffix(strings.Repeat(s+",", n), ",")
}

// ownFile is what the cache writes for n services of 3 nodes with the
// metadata go-micro's servers register.
func ownFile(t testing.TB, n int) []byte {
	f := New(time.Now())
	for i := 0; i < n; i++ {
		name := fmt.Sprint("svc-", i)
		s := &registry.Service{Name: name, Version: "1.0.0", Metadata: map[string]string{"team": "a"}}
		for j := 0; j < 3; j++ {
			s.Nodes = append(s.Nodes, &registry.Node{Id: fmt.Sprintf("%s-%08x", name, j), Address: "10.0.0.1:8080",
				Metadata: map[string]string{"broker": "http", "protocol": "mucp", "registry": "etcd", "server": "mucp", "transport": "http"}})
		}
		f.Services = append(f.Services, Entry{Name: name, Refreshed: time.Now(), Services: []*registry.Service{s}})
	}
	data, err := json.Marshal(f)
	require.NoError(t, err)
	return data
}

// allocated is the memory that decoding data into a snapshot file takes.
func allocated(data []byte) int {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var f File
	_ = json.Unmarshal(data, &f)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(&f)
	return int(after.TotalAlloc - before.TotalAlloc)
}

// The estimate is never below what encoding/json takes, for the worst
// file of each kind of object and for the cache's own files.
func TestDecodeCostIsNeverBelowTheCost(t *testing.T) {
	const n = 1 << 15
	md := func(entries int) string {
		var b strings.Builder
		for i := 0; i < entries; i++ {
			fmt.Fprintf(&b, `"%x":"",`, i)
		}
		return `{"metadata":{` + strings.TrimSuffix(b.String(), ",") + `}}`
	}
	for name, data := range map[string][]byte{
		"empty services":         fileOf(repeat("{}", n)),
		"null services":          fileOf(repeat("null", n)),
		"empty nodes":            fileOf(`{"nodes":[` + repeat("{}", n) + `]}`),
		"empty endpoints":        fileOf(`{"endpoints":[` + repeat("{}", n) + `]}`),
		"empty metadata":         fileOf(`{"nodes":[` + repeat(`{"metadata":{}}`, n) + `]}`),
		"small metadata":         fileOf(`{"nodes":[` + repeat(md(5), n/8) + `]}`),
		"large metadata":         fileOf(`{"nodes":[` + repeat(md(64), n/64) + `]}`),
		"one huge map":           fileOf(md(n)),
		"empty values":           fileOf(`{"endpoints":[{"request":{"values":[` + repeat("{}", n) + `]}}]}`),
		"escaped request fields": fileOf(`{"endpoints":[` + repeat(`{"\u0072equest":{}}`, n) + `]}`),
		"empty listed services":  []byte(`{"services":[` + repeat("{}", n) + `]}`),
		"own file":               ownFile(t, 2000),
	} {
		cost, err := decodeCost(data)
		require.NoError(t, err)
		got := allocated(data)
		assert.GreaterOrEqual(t, cost, got, "%s: estimated %d, took %d", name, cost, got)
	}
}

// 16 MiB of empty nodes took 514 MiB to decode, though under the byte
// cap. It is refused now before decoding.
func TestSnapshotOfEmptyObjectsIsRefusedBeforeDecoding(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty-nodes.json")
	require.NoError(t, os.WriteFile(path, fileOf(`{"nodes":[`+repeat("{}", 16<<20/3)+`]}`), 0o600))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := Read(path, time.Now())
	runtime.ReadMemStats(&after)
	assert.EqualError(t, err, "too large to load: decoding it would take more than 384 MiB")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(24<<20), "the file's bytes, read")
}

// The file the cache writes for 100 000 services of 3 nodes, near the byte
// cap, is within the bound.
func TestTheCachesOwnFilesAreWithinTheBound(t *testing.T) {
	const sample, target = 2000, 100000
	data := ownFile(t, sample)
	cost, err := decodeCost(data)
	require.NoError(t, err)
	assert.Less(t, cost/sample*target, maxDecode)
	assert.Less(t, len(data)/sample*target, maxSize)
	require.NoError(t, scan(data))
}

func TestDecodeCostReadsStructureNotStrings(t *testing.T) {
	plain, err := decodeCost(fileOf(`{"name":"ab"}`))
	require.NoError(t, err)
	tricky := fileOf(`{"name":"{[,:]}\"{\\"}`)
	cost, err := decodeCost(tricky)
	require.NoError(t, err)
	assert.Equal(t, plain+len(tricky)-len(fileOf(`{"name":"ab"}`)), cost, "brackets in strings are text")

	// An endpoint's request is a struct; any other object that is a
	// field's value counts as a map, whose entries cost.
	request, _ := decodeCost(fileOf(`{"endpoints":[{"REQUEST":{"name":"a","type":"b"}}]}`))
	other, _ := decodeCost(fileOf(`{"endpoints":[{"reques\u0074":{"name":"a","type":"b"}}]}`))
	assert.Equal(t, len(`\u0074`)-1+2*costSmallMember, other-request)

	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	_, err = decodeCost([]byte(deep))
	assert.EqualError(t, err, "nested deeper than 128 levels")
	_, err = decodeCost([]byte(deep[1 : len(deep)-1]))
	assert.NoError(t, err)
}

func TestSnapshotOverTheByteCapIsNotRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	require.NoError(t, os.Truncate(path, maxSize+1)) // sparse: nothing to read
	_, _, err := Read(path, time.Now())
	assert.EqualError(t, err, "larger than 67108864 bytes")
}
