package peers

import (
	"math"
	"strings"
	"testing"
)

// The table pairs xlane and Cilium of the same routing, takes medians,
// and marks a ratio that misses the target in the row's direction.
func TestMarkdown(t *testing.T) {
	r := &Report{Reps: 3, Seconds: 10, Setups: []Setup{
		{Name: "xlane-vxlan", Peer: "xlane", Routing: "vxlan"},
		{Name: "cilium-vxlan", Peer: "cilium", Routing: "vxlan", Config: []string{"cilium-agent --routing-mode=tunnel"}},
		{Name: "xlane-native", Peer: "xlane", Routing: "native"}, // no Cilium peer: no ratio column
	}}
	tput, cpu := "pod-pod across nodes, TCP 1 stream", "pod-pod across nodes, TCP 1 stream, CPU"
	for i, v := range []float64{10, 12, 11} {
		r.Add("xlane-vxlan", tput, i+1, v)
		r.Add("cilium-vxlan", tput, i+1, v*2) // median 22: xlane 0.5x, a loss
		r.Add("xlane-vxlan", cpu, i+1, 0.1)
		r.Add("cilium-vxlan", cpu, i+1, 0.2) // xlane 0.5x the CPU: a win
	}
	if m := r.Median("xlane-vxlan", tput); m != 11 {
		t.Errorf("median %v, want 11", m)
	}
	if m := r.Median("cilium-native", tput); !math.IsNaN(m) {
		t.Errorf("median of no samples %v, want NaN", m)
	}
	md := r.Markdown()
	for _, want := range []string{
		"| xlane-vxlan | cilium-vxlan | xlane-native | xlane ÷ Cilium (vxlan) |",
		"| " + tput + " | Gbit/s | 11.0 | 22.0 | — | 0.50 ✗ |",
		"| " + cpu + " | CPU-s/Gbit | 0.10 | 0.20 | — | 0.50 |",
		"    cilium-agent --routing-mode=tunnel",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown has no %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "(native)") {
		t.Errorf("a ratio column for native, which has no Cilium setup:\n%s", md)
	}
}

// The 64-byte row counts what the receiver got: its packets less those
// it counted lost (iperf3 3.12's UDP sums).
func TestIperfUDP(t *testing.T) {
	out := []byte(`{"end":{"sum":{"packets":117260,"lost_packets":65855},
		"sum_sent":{"seconds":1.0,"packets":117260,"lost_packets":0},
		"sum_received":{"seconds":2.0,"packets":114300,"lost_packets":65855}}}`)
	sent, recv, err := IperfUDP(out)
	if err != nil || sent != 117260 || recv != (114300-65855)/2.0 {
		t.Errorf("IperfUDP: %v %v %v, want 117260 24222.5", sent, recv, err)
	}
	if _, _, err := IperfUDP([]byte(`{"error":"unable to connect"}`)); err == nil || !strings.Contains(err.Error(), "unable to connect") {
		t.Errorf("IperfUDP of an error: %v", err)
	}
}
