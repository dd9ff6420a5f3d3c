package regcacheprometheus

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/regcache/cache/statstest"
)

// gatherAll gathers the collector with every option: the selectors' and
// each service's series.
func gatherAll(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	c, sel := statstest.EjectOne(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(c, WithSelectors(sel), WithServiceMetrics()))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// The collector, with every option, exports the metrics of the table in
// docs/metrics.md, each with its help text, type and labels, and no
// other; the table names every value of a label but the service's.
func TestMetricsAreTheDocumented(t *testing.T) {
	got := map[string]*dto.MetricFamily{}
	for _, mf := range gatherAll(t) {
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
		for _, series := range mf.GetMetric() {
			var names []string
			for _, l := range series.GetLabel() {
				names = append(names, l.GetName())
				if l.GetName() != serviceLabel && !strings.Contains(m.From, `"`+l.GetValue()+`"`) {
					t.Errorf("%s{%s=%q}: the value is not documented", m.Prometheus, l.GetName(), l.GetValue())
				}
			}
			if !slices.Equal(names, m.Labels) {
				t.Errorf("%s: labels %v, documented %v", m.Prometheus, names, m.Labels)
			}
		}
	}
	for name := range got {
		t.Errorf("%s: exported, not documented", name)
	}
}

// No label is one that Prometheus, or its Operator, gives every series of
// a target: it would rename ours exported_<name>.
func TestNoLabelIsATargetLabel(t *testing.T) {
	families := gatherAll(t)
	labels := 0
	for _, mf := range families {
		for _, series := range mf.GetMetric() {
			for _, l := range series.GetLabel() {
				labels++
				if slices.Contains(statstest.TargetLabels, l.GetName()) {
					t.Errorf("%s: label %s is a target label", mf.GetName(), l.GetName())
				}
			}
		}
	}
	if labels == 0 {
		t.Error("no label gathered: the check checked nothing")
	}
}
