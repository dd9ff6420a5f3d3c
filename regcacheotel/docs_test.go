package regcacheotel

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/regcache/cache/statstest"
)

// Register, with every option, makes the instruments of the table in
// docs/metrics.md, each with its help text as description and of its type
// (a counter is a monotonic sum), and no other.
func TestInstrumentsAreTheDocumented(t *testing.T) {
	c, sel := statstest.EjectOne(t)
	r := newReader(t)
	if _, err := Register(r.meter(), c, WithSelectors(sel), WithServiceMetrics()); err != nil {
		t.Fatal(err)
	}
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
		sum, isSum := inst.Data.(metricdata.Sum[int64])
		if counter := isSum && sum.IsMonotonic; counter != m.Counter {
			t.Errorf("%s: data %T, documented as a counter: %v", m.OpenTelemetry, inst.Data, m.Counter)
		}
	}
	for name := range got {
		t.Errorf("%s: exported, not documented", name)
	}
}
