package regcacheotel

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/regcache/cache/statstest"
)

// collectAll registers the instruments with every option, the selectors'
// and each service's, and collects once.
func collectAll(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	c, sel := statstest.EjectOne(t)
	r := newReader(t)
	r.register(c, WithSelectors(sel), WithServiceMetrics())
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// attributeSets returns the attribute sets of m's data points.
func attributeSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Sum[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

// Register, with every option, makes the instruments of the table in
// docs/metrics.md, each with its help text as description, of its type (a
// counter is a monotonic sum) and with its attributes, and no other; the
// table names every value of an attribute but the service's.
func TestInstrumentsAreTheDocumented(t *testing.T) {
	got := collectAll(t)
	for _, m := range statstest.DocumentedMetrics(t) {
		inst, ok := got[m.OpenTelemetry]
		if !ok {
			t.Errorf("%s: documented, not exported", m.OpenTelemetry)
			continue
		}
		delete(got, m.OpenTelemetry)
		if inst.Description != m.Help {
			t.Errorf("%s: description %q, documented %q", m.OpenTelemetry, inst.Description, m.Help)
		}
		counter := false
		switch d := inst.Data.(type) {
		case metricdata.Sum[int64]:
			counter = d.IsMonotonic
		case metricdata.Sum[float64]:
			counter = d.IsMonotonic
		}
		if counter != m.Counter {
			t.Errorf("%s: data %T, documented as a counter: %v", m.OpenTelemetry, inst.Data, m.Counter)
		}
		sets := attributeSets(inst)
		if len(sets) == 0 {
			t.Errorf("%s: no data point", m.OpenTelemetry)
		}
		for _, set := range sets {
			var keys []string
			for _, kv := range set.ToSlice() {
				keys = append(keys, string(kv.Key))
				if kv.Key != serviceAttr && !strings.Contains(m.From, `"`+kv.Value.Emit()+`"`) {
					t.Errorf("%s{%s=%s}: the value is not documented", m.OpenTelemetry, kv.Key, kv.Value.Emit())
				}
			}
			if !slices.Equal(keys, m.Attributes) {
				t.Errorf("%s: attributes %v, documented %v", m.OpenTelemetry, keys, m.Attributes)
			}
		}
	}
	for name := range got {
		t.Errorf("%s: exported, not documented", name)
	}
}

// No attribute becomes, through OpenTelemetry's Prometheus exporter (which
// writes '_' for '.'), a label that Prometheus or its Operator gives every
// series of a target: it would rename ours exported_<name>.
func TestNoAttributeIsATargetLabel(t *testing.T) {
	attrs := 0
	for name, m := range collectAll(t) {
		for _, set := range attributeSets(m) {
			for _, kv := range set.ToSlice() {
				attrs++
				if label := strings.ReplaceAll(string(kv.Key), ".", "_"); slices.Contains(statstest.TargetLabels, label) {
					t.Errorf("%s: attribute %s is the target label %s", name, kv.Key, label)
				}
			}
		}
	}
	if attrs == 0 {
		t.Error("no attribute collected: the check checked nothing")
	}
}
