package regcacheprometheus

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/regcache/cache/statstest"
)

// The collector, with every option, exports the metrics of the table in
// docs/metrics.md, each with its help text and type, and no other.
func TestMetricsAreTheDocumented(t *testing.T) {
	c, sel := statstest.EjectOne(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, WithSelectors(sel), WithServiceMetrics()))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range families {
		got[mf.GetName()] = mf
	}
	for _, m := range statstest.DocumentedMetrics(t) {
		mf, ok := got[m.Prometheus]
		if !ok {
			t.Errorf("%s: documented, not exported", m.Prometheus)
			continue
		}
		delete(got, m.Prometheus)
		if mf.GetHelp() != m.Help {
			t.Errorf("%s: help %q, documented %q", m.Prometheus, mf.GetHelp(), m.Help)
		}
		if counter := mf.GetType() == dto.MetricType_COUNTER; counter != m.Counter {
			t.Errorf("%s: type %v, documented as a counter: %v", m.Prometheus, mf.GetType(), m.Counter)
		}
	}
	for name := range got {
		t.Errorf("%s: exported, not documented", name)
	}
}
