package cache

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode"

	"github.com/regcache/cache/internal/core"

	"github.com/regcache/cache/internal/fakereg"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A program must be able to export Stats and the rows of Services as JSON:
// the observer and the logger in Options are left out, everything else
// goes and comes back.
func TestStatsEncodesToJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a", "b")
		c, _ := newTestCache(t, f, WithObserver(func(Event) {}), WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		f.Fail(errDown)
		expire(c, "svc")
		_, _ = c.Lookup("svc")
		synctest.Wait()

		st := c.Stats()
		data, err := json.Marshal(st)
		require.NoError(t, err)
		var back Stats
		require.NoError(t, json.Unmarshal(data, &back))
		again, err := json.Marshal(back)
		require.NoError(t, err)
		assert.JSONEq(t, string(data), string(again), "every field comes back")
		assert.Equal(t, st.Lookups, back.Lookups)
		assert.Equal(t, st.Options.TTL, back.Options.TTL)
		assert.Nil(t, back.Options.Logger)

		rows := c.Services("", "", 0)
		require.NotEmpty(t, rows[0].LastError)
		data, err = json.Marshal(rows)
		require.NoError(t, err)
		var backRows []ServiceStats
		require.NoError(t, json.Unmarshal(data, &backRows))
		again, err = json.Marshal(backRows)
		require.NoError(t, err)
		assert.JSONEq(t, string(data), string(again), "every field of a row comes back")
		assert.Equal(t, rows[0].LastError, backRows[0].LastError)
		assert.True(t, rows[0].LastErrorAt.Equal(backRows[0].LastErrorAt))
	})
}

// A service restarting during a deploy is served from its create event
// until the registry confirms it: those lookups are event serves, not
// stale serves, and the service's row says where its nodes came from.
func TestStatsRestartServedFromEventIsNotStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "old")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		time.Sleep(time.Second)

		// The restart: the old instance goes, the new one comes.
		f.SetNodes("svc", "new")
		deliver(f.Stream(), "delete", svc("svc", "1", "old"))
		deliver(f.Stream(), "create", svc("svc", "1", "new"))
		for i := 0; i < 20; i++ { // within core.ReplacementGrace
			got, err := c.Lookup("svc")
			require.NoError(t, err)
			require.Equal(t, []string{"new"}, nodeIDs(got))
			time.Sleep(10 * time.Millisecond)
		}
		st := c.Stats()
		assert.Equal(t, uint64(20), st.EventServes)
		assert.Zero(t, st.StaleServes, "a restart is no staleness")
		assert.Zero(t, st.StaleServedAge)
		require.Len(t, c.dataRows(), 1)
		row := c.dataRows()[0]
		assert.False(t, row.Fresh, "no refresh has confirmed it")
		assert.True(t, row.Unconfirmed)
		assert.Equal(t, SourceEvent, row.Source)

		// The refresh that the delete asked for goes after
		// core.ReplacementGrace, and confirms the new node: fresh.
		time.Sleep(core.ReplacementGrace)
		synctest.Wait()
		_, err := c.Lookup("svc")
		require.NoError(t, err)
		st = c.Stats()
		assert.Equal(t, uint64(20), st.EventServes, "confirmed before the lookup")
		assert.Zero(t, st.StaleServes)
		row = c.dataRows()[0]
		assert.True(t, row.Fresh)
		assert.False(t, row.Unconfirmed)
		assert.Equal(t, SourceRefresh, row.Source)
	})
}

// An outage is counted, with its length, as the registry's state changes,
// whether or not any refresh is due.
func TestStatsCountOutages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("a", "1")
		f.SetNodes("b", "1")
		c, _ := newTestCache(t, f, WithTTL(time.Hour))
		defer c.Stop()
		warm(t, c, "a", "b")
		st := c.Stats()
		assert.Equal(t, StreamConnected, st.Stream)
		assert.Zero(t, st.Outages)

		f.Fail(errDown)
		f.SetWatchFault(fakereg.WatchFault{WatchErr: errDown})
		f.Stream().Break(errDown)
		time.Sleep(10 * time.Second)
		st = c.Stats()
		require.True(t, st.RegistryDown, "the stream lost and its redial failed")
		assert.Equal(t, uint64(1), st.Outages)
		assert.Equal(t, StreamReconnecting, st.Stream)
		assert.Contains(t, st.RegistryError, errDown.Error())
		assert.Equal(t, time.Since(st.RegistryDownSince), st.DownTime)
		assert.Positive(t, st.DownTime)

		f.Fail(nil)
		f.SetWatchFault(fakereg.WatchFault{})
		time.Sleep(2 * time.Second)
		st = c.Stats()
		require.False(t, st.RegistryDown)
		assert.Equal(t, StreamConnected, st.Stream)
		down := st.DownTime
		assert.Greater(t, down, 9*time.Second)
		time.Sleep(time.Minute)
		st = c.Stats()
		assert.Equal(t, uint64(1), st.Outages)
		assert.Equal(t, down, st.DownTime, "no time down once it is back")
	})
}

// A registry that re-announces the nodes the cache holds (a
// re-registration) confirms nothing new: the data keeps its source, and
// once expired it is stale, not unconfirmed.
func TestStatsReannouncedNodesKeepTheirSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRegistry()
		f.SetNodes("svc", "a")
		c, _ := newTestCache(t, f, WithTTL(time.Minute))
		defer c.Stop()
		warm(t, c, "svc")
		deliver(f.Stream(), "update", svc("svc", "1", "a"))
		row := c.dataRows()[0]
		assert.Equal(t, SourceRefresh, row.Source)
		assert.False(t, row.Unconfirmed)

		deliver(f.Stream(), "update", svc("svc", "1", "b"))
		row = c.dataRows()[0]
		assert.Equal(t, SourceEvent, row.Source, "a node the cache did not hold")
		assert.True(t, row.Unconfirmed)
	})
}

// jsonNames are the JSON names of the fields of every type that Stats and
// SelectorStats hold, by type. They are part of the API: a change here is
// a change for every program and dashboard that reads the JSON, and goes
// in CHANGES.md.
var jsonNames = map[string][]string{
	"Stats": {"lookups", "fresh_hits", "event_serves", "stale_serves", "throttled", "misses", "invalid",
		"refreshes", "refresh_errors", "lists", "events_applied", "events_ignored", "events_invalidating",
		"watch_reconnects", "observer_dropped", "registry_down", "registry_down_since", "registry_error",
		"outages", "down_time_seconds", "stream", "stream_since", "snapshot_error", "entries",
		"stale_served_age_seconds", "options"},
	"Options": {"ttl_seconds", "minimum_retry_interval_seconds", "maximum_retry_interval_seconds", "refresh_ahead",
		"ttl_jitter", "maximum_stale_seconds", "last_known_nodes", "idle_eviction_seconds", "snapshot_path",
		"probe_interval_seconds", "watch_per_service"},
	"ServiceStats": {"name", "nodes", "age_seconds", "failures", "source", "last_error", "last_error_at",
		"retry_at", "fresh", "unconfirmed", "refreshing", "last_known_nodes", "node_list"},
	"NodeStats":     {"id", "address", "version", "metadata"},
	"SelectorStats": {"failures", "ejections", "refused", "readmitted", "ignored", "mass_losses", "limbo_nodes", "limbo", "ejected", "cache"},
	"LimboNode":     {"service", "id", "address", "age_seconds", "remaining_seconds", "reached", "reason"},
	"EjectedNode":   {"service", "id", "address", "ejections", "remaining_seconds", "reason"},
}

// statsTypes are the types that jsonNames names, as nested in
// SelectorStats.
var statsTypes = []reflect.Type{
	reflect.TypeFor[Stats](), reflect.TypeFor[Options](), reflect.TypeFor[ServiceStats](),
	reflect.TypeFor[NodeStats](), reflect.TypeFor[SelectorStats](), reflect.TypeFor[EjectedNode](),
	reflect.TypeFor[LimboNode](),
}

// The JSON of every type names its fields as jsonNames says: no name
// missing, none more. A field added to a type fails here until its JSON
// name is added.
func TestStatsJSONNames(t *testing.T) {
	for _, typ := range statsTypes {
		v := reflect.New(typ)
		fill(v.Elem())
		data, err := json.Marshal(v.Interface())
		require.NoError(t, err, typ)
		var keys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(data, &keys), typ)
		want := jsonNames[typ.Name()]
		require.NotEmpty(t, want, "%s has no golden list", typ)
		assert.ElementsMatch(t, want, slices.Collect(maps.Keys(keys)), "the JSON names of %s", typ)
	}
}

// Every JSON name is its Go field's name in snake_case, a duration's with
// "_seconds" after it and its value a number of seconds; times are RFC
// 3339. One style for every type, as on the status page.
func TestStatsJSONStyle(t *testing.T) {
	durations := 0
	for _, typ := range statsTypes {
		v := reflect.New(typ)
		fill(v.Elem())
		data, err := json.Marshal(v.Interface())
		require.NoError(t, err, typ)
		var keys map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(data, &keys), typ)
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			name := snake(f.Name)
			value := v.Elem().FieldByIndex(f.Index)
			switch f.Type {
			case reflect.TypeFor[time.Duration]():
				durations++
				name += "_seconds"
				require.Contains(t, keys, name, "%s.%s", typ.Name(), f.Name)
				var secs float64
				require.NoError(t, json.Unmarshal(keys[name], &secs), "%s.%s: %s", typ.Name(), f.Name, keys[name])
				assert.Equal(t, time.Duration(value.Int()).Seconds(), secs, "%s.%s in seconds", typ.Name(), f.Name)
			case reflect.TypeFor[time.Time]():
				require.Contains(t, keys, name, "%s.%s", typ.Name(), f.Name)
				assert.Equal(t, `"`+value.Interface().(time.Time).Format(time.RFC3339Nano)+`"`, string(keys[name]), "%s.%s", typ.Name(), f.Name)
			default:
				assert.Contains(t, keys, name, "%s.%s", typ.Name(), f.Name)
			}
		}
	}
	assert.Equal(t, 12, durations, "the durations checked")
}

// A time that does not apply (zero) is left out, and so are an empty
// error, source, list or map; counters and flags are always there, zero
// or not.
func TestStatsJSONLeavesOutWhatDoesNotApply(t *testing.T) {
	data, err := json.Marshal(SelectorStats{Cache: Stats{Options: Options{TTL: time.Second}}, Ejected: []EjectedNode{{}}})
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(data, &st))
	for _, name := range []string{"registry_down_since", "stream_since", "registry_error", "snapshot_error"} {
		assert.NotContains(t, st["cache"], name)
	}
	assert.Contains(t, st["cache"], "lookups")
	assert.Contains(t, st["cache"], "registry_down")
	assert.Contains(t, st["cache"], "down_time_seconds")
	assert.NotContains(t, st["cache"].(map[string]any)["options"], "snapshot_path")
	assert.Equal(t, map[string]any{"service": "", "id": "", "address": "", "ejections": 0.0, "remaining_seconds": 0.0, "reason": ""},
		st["ejected"].([]any)[0])

	data, err = json.Marshal(ServiceStats{Name: "svc"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"name": "svc", "nodes": 0, "age_seconds": 0, "failures": 0, "fresh": false, "unconfirmed": false,
		"refreshing": false, "last_known_nodes": false}`, string(data))

	data, err = json.Marshal(SelectorStats{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"failures": 0, "ejections": 0, "refused": 0, "readmitted": 0, "ignored": 0, "mass_losses": 0, "limbo_nodes": 0}`, string(data),
		"no cache: the status page shows it once, not per selector")
}

// A duration comes back from its seconds to the nanosecond (below 48
// days: a float64's precision).
func TestStatsJSONDurationsComeBack(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1500 * time.Millisecond, 90 * time.Minute, 365 * 24 * time.Hour, -3 * time.Second, 47*24*time.Hour + 7} {
		data, err := json.Marshal(EjectedNode{Remaining: d})
		require.NoError(t, err)
		var back EjectedNode
		require.NoError(t, json.Unmarshal(data, &back), "%s", data)
		assert.Equal(t, d, back.Remaining, "%s", data)
	}
	l := LimboNode{Service: "svc", Age: 1500 * time.Millisecond, Remaining: 47*24*time.Hour + 7, Reached: true}
	data, err := json.Marshal(l)
	require.NoError(t, err)
	var lback LimboNode
	require.NoError(t, json.Unmarshal(data, &lback), "%s", data)
	assert.Equal(t, l, lback, "%s", data)
	assert.Error(t, json.Unmarshal([]byte(`{"age_seconds": 1e300}`), &lback), "out of a duration's range")

	var back EjectedNode
	assert.Error(t, json.Unmarshal([]byte(`{"remaining_seconds": 1e300}`), &back), "out of a duration's range")
	assert.Error(t, json.Unmarshal([]byte(`{"remaining_seconds": "1s"}`), &back))
}

// fill sets every exported field of v, and of the structs, slices and
// maps in it, to a value that is not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 5, 4, 3, 2, 1, 500_000_000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(1500 * int64(time.Millisecond))
	case reflect.Uint64:
		v.SetUint(7)
	case reflect.Float64:
		v.SetFloat(0.25)
	}
}

// snake is name in snake_case: "TTLJitter" is "ttl_jitter", "Id" is "id".
func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 {
			prev, next := rune(name[i-1]), rune(0)
			if i+1 < len(name) {
				next = rune(name[i+1])
			}
			if unicode.IsLower(prev) || unicode.IsUpper(prev) && unicode.IsLower(next) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
