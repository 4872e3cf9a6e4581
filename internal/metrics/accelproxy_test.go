package metrics

import (
	"testing"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/version"
)

// Every socket-layer counter the BPF objects define has a unit here, and
// nothing here names a counter they do not define.
func TestAccelProxyCountersHaveUnits(t *testing.T) {
	for _, c := range []struct {
		enum  string
		names func() ([]string, error)
		units map[string]unit
	}{
		{"accel_stat", bpf.AccelStatNames, accelUnits},
		{"proxy_stat", bpf.ProxyStatNames, proxyUnits},
	} {
		names, err := c.names()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, n := range names {
			seen[n] = true
			u, ok := c.units[n]
			if !ok {
				t.Errorf("enum %s: %s has no metric (give it its unit in accel.go or proxy.go)", c.enum, n)
				continue
			}
			if len(u.labels) != len(u.metric.Labels) {
				t.Errorf("%s: %d label values for %s's %v", n, len(u.labels), u.metric.Name, u.metric.Labels)
			}
		}
		for n := range c.units {
			if !seen[n] {
				t.Errorf("accel.go or proxy.go maps %s, which enum %s does not define", n, c.enum)
			}
		}
	}
}

// Sockets, messages and bytes are separate metrics (they shared
// xlane_accel_total{counter}, a sum of which added sockets to bytes).
func TestAccelProxyMetricsByUnit(t *testing.T) {
	mfs := gather(t, New(&fakeSource{s: full()}, version.Info{Version: "test"}, quiet()))
	for _, c := range []struct {
		metric Metric
		labels map[string]string
		want   float64
	}{
		{AccelSockets, map[string]string{LabelEvent: "added"}, 2},
		{AccelMessages, map[string]string{LabelEvent: "redirected"}, 10},
		{AccelBytes, map[string]string{LabelEvent: "redirected"}, 1000},
		{AccelDirections, map[string]string{LabelReason: "backlog"}, 1},
		{AccelMapSockets, nil, 2},
		{ProxyConnections, map[string]string{LabelDirection: "out", LabelEvent: "redirected"}, 1},
		{ProxyOrigDst, map[string]string{LabelResult: "found"}, 1},
		{ProxyListeners, nil, 1},
	} {
		mf := mfs[c.metric.Name]
		if mf == nil {
			t.Errorf("%s: not exported", c.metric.Name)
			continue
		}
		if got, ok := value(mf, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (%v), want %v", c.metric.Name, c.labels, got, ok, c.want)
		}
	}
	for _, old := range []string{"xlane_accel_total", "xlane_proxy_total"} {
		if mfs[old] != nil {
			t.Errorf("%s: still exported, mixing units", old)
		}
	}
}
