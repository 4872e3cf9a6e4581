package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

func TestKernelConfig(t *testing.T) {
	cfg := "# comment\nCONFIG_BRIDGE_EBT_VLAN=y\n# CONFIG_VLAN_8021Q is not set\nCONFIG_MACVLAN=m\n"
	got := kernelConfig(cfg, "CONFIG_VLAN_8021Q", "CONFIG_MACVLAN", "CONFIG_BRIDGE_VLAN_FILTERING")
	want := "CONFIG_VLAN_8021Q not set, CONFIG_MACVLAN=m, CONFIG_BRIDGE_VLAN_FILTERING absent"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := kernelConfig("", "CONFIG_VLAN_8021Q"); got != "kernel config not readable" {
		t.Errorf("empty config: got %q", got)
	}
}

// Two reps: medians, ratios to the base of the same path and streams,
// CPU and TCP_RR columns, and the targets met or missed.
func TestMarkdown(t *testing.T) {
	o := options{RunFlags: harness.RunFlags{Reps: 2, Duration: 2 * time.Second},
		setups: []string{"xlane-tc", "linux-vxlan"}, streams: []int{1}, scenarios: []int{1, 2}}
	r := report{RunHeader: harness.RunHeader{Kernel: "6.18", CPU: "EPYC", NProc: 2, LoadStart: "1", LoadEnd: "2"}}
	for rep := 0; rep < 2; rep++ {
		r.Results = append(r.Results,
			result{Scenario: 2, Path: "pod-pod", Setup: "xlane-tc", Streams: 1, Rep: rep, Gbps: 16, CPUPerGbit: 0.05},
			result{Scenario: 2, Path: "pod-pod", Setup: "linux-vxlan", Streams: 1, Rep: rep, Gbps: 10, CPUPerGbit: 0.1},
			result{Scenario: 1, Path: "nat-vxlan", Setup: "xlane-tc", Streams: 1, Rep: rep, Gbps: 12 + float64(rep)*4, CPUPerGbit: 0.1},
			result{Scenario: 1, Path: "nat-vxlan", Setup: "linux", Streams: 1, Rep: rep, Gbps: 10, CPUPerGbit: 0.1},
			result{Scenario: 1, Path: "vlan-vxlan", Setup: "xlane-tc", Streams: 1, Rep: rep, Gbps: 5, CPUPerGbit: 0.2})
		r.RR = append(r.RR,
			rrResult{Scenario: 2, Path: "pod-pod", Setup: "xlane-tc", Rep: rep, PerSec: 30000, P50Us: 30, P99Us: 60},
			rrResult{Scenario: 2, Path: "pod-pod", Setup: "linux-vxlan", Rep: rep, PerSec: 20000, P50Us: 40, P99Us: 80})
	}
	r.Notes = []string{"vlan-vxlan, linux: no equivalent"}
	md := r.markdown(o)
	for _, want := range []string{
		"| pod-pod | xlane-tc | 1 | 16.00 | 1.60x | 0.050 | 0.50x | 0 |",
		"| pod-pod | linux-vxlan | 1 | 10.00 | 1.00x | 0.100 | 1.00x | 0 |",
		"| pod-pod | xlane-tc | 30000 | 1.50x | 30.0 | 0.75x | 60.0 | 0.75x |",
		"| nat-vxlan | xlane-tc | 1 | 14.00 | 1.40x |",         // median of 12 and 16
		"| vlan-vxlan | xlane-tc | 1 | 5.00 | - | 0.200 | - |", // no Linux row
		"| s2 pod-pod xlane-tc: Gbit/s >= 1.5x linux-vxlan | 1 | 1.60x | met |",
		"| s2 pod-pod xlane-tc: CPU-s/Gbit <= 0.6x linux-vxlan | 1 | 0.50x | met |",
		"| s1 nat-vxlan xlane-tc: Gbit/s >= 2.0x linux | 1 | 1.40x | **missed** |",
		"- vlan-vxlan, linux: no equivalent",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	// Scenario 1 has no TCP_RR rows here: its table has a header only.
	if strings.Contains(md, "| nat-vxlan | xlane-tc | -") {
		t.Errorf("a TCP_RR row without measurements:\n%s", md)
	}
}

// Issue 28's targets: xlane-tc-wg against linux-wg (throughput and CPU
// per stream count, TCP_RR once) and against xlane-tc at 8 streams only.
func TestMarkdownWireGuard(t *testing.T) {
	o := options{RunFlags: harness.RunFlags{Reps: 1, Duration: 2 * time.Second},
		setups: []string{"xlane-tc", "linux-vxlan", "xlane-tc-wg", "linux-wg"}, streams: []int{1, 8}, scenarios: []int{2}}
	var r report
	for _, n := range []int{1, 8} {
		r.Results = append(r.Results,
			result{Scenario: 2, Path: "pod-pod", Setup: "xlane-tc", Streams: n, Gbps: 10, CPUPerGbit: 0.1},
			result{Scenario: 2, Path: "pod-pod", Setup: "linux-vxlan", Streams: n, Gbps: 10, CPUPerGbit: 0.1},
			result{Scenario: 2, Path: "pod-pod", Setup: "xlane-tc-wg", Streams: n, Gbps: 3, CPUPerGbit: 0.8},
			result{Scenario: 2, Path: "pod-pod", Setup: "linux-wg", Streams: n, Gbps: 2, CPUPerGbit: 1})
	}
	r.RR = append(r.RR,
		rrResult{Scenario: 2, Path: "pod-pod", Setup: "xlane-tc-wg", PerSec: 11000},
		rrResult{Scenario: 2, Path: "pod-pod", Setup: "linux-wg", PerSec: 10000})
	md := r.markdown(o)
	for _, want := range []string{
		"# Issue 28's targets",
		"| s2 pod-pod xlane-tc-wg: Gbit/s >= 1.1x linux-wg | 1 | 1.50x | met |",
		"| s2 pod-pod xlane-tc-wg: CPU-s/Gbit <= 0.9x linux-wg | 8 | 0.80x | met |",
		"| s2 pod-pod xlane-tc-wg: TCP_RR trans/s >= 1.2x linux-wg | 0 | 1.10x | **missed** |",
		"| s2 pod-pod xlane-tc-wg: Gbit/s >= 0.5x xlane-tc | 8 | 0.30x | **missed** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing %q in\n%s", want, md)
		}
	}
	for _, not := range []string{"xlane-tc-wg: Gbit/s >= 0.5x xlane-tc | 1 |", "xlane-tc-wg: Gbit/s >= 1.5x linux-vxlan"} {
		if strings.Contains(md, not) {
			t.Errorf("unexpected %q in\n%s", not, md)
		}
	}
}
