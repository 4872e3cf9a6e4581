package main

import (
	"slices"
	"testing"
)

func TestDiffCounters(t *testing.T) {
	a := counterSnapshot{{"x", "link rx_dropped"}: 5, {"x", "ethtool rx_queue_0_xdp_packets"}: 1}
	b := counterSnapshot{{"x", "link rx_dropped"}: 9, {"x", "ethtool rx_queue_0_xdp_packets"}: 1, {"y", "new"}: 2}
	got := diffCounters(a, b)
	want := []CounterDelta{{"x", "link rx_dropped", 4}, {"y", "new", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("diffCounters = %v, want %v", got, want)
	}
	if !isDropName("tx_queue_0_xdp_xmit_errors") || !isDropName("drop from_endpoint/drop_spoofed") || isDropName("from_endpoint/fwd_peer") {
		t.Error("isDropName")
	}
}

func TestRatioPairs(t *testing.T) {
	got := ratioPairs([]string{"docker", "kernel", "tc", "xdp-generic", "xdp"})
	want := [][2]string{
		{"tc", "kernel"}, {"xdp-generic", "kernel"}, {"xdp", "kernel"},
		{"kernel", "docker"}, {"tc", "docker"}, {"xdp-generic", "docker"}, {"xdp", "docker"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ratioPairs = %v, want %v", got, want)
	}
	if got := ratioPairs([]string{"tc", "xdp"}); len(got) != 0 {
		t.Errorf("no baseline: %v", got)
	}
	got = ratioPairs([]string{"tc", "tc+metrics", "tc+monitor-all", "tc@base"})
	want = [][2]string{{"tc+metrics", "tc"}, {"tc+monitor-all", "tc"}, {"tc@base", "tc"}}
	if !slices.Equal(got, want) {
		t.Errorf("observe: ratioPairs = %v, want %v", got, want)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0.7, 0.8}, {9.5, 10}, {50.76, 60}, {101, 120}, {0, 1}, {2.5, 2.5}} {
		if got := niceCeil(c.in); got < c.want*0.9999 || got > c.want*1.0001 {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
