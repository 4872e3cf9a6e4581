package bpf

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"
)

// TestToEndpointUnsolicited runs xlane_to_endpoint (tcx egress) on a TCP
// segment Linux forwarded from off the node (ingress device 1, not the
// source's): without a conntrack entry of its flow, in either direction,
// it is dropped as drop_unsolicited, unless the endpoint's network allows
// unsolicited flows; the node's own packets (no ingress device) pass.
func TestToEndpointUnsolicited(t *testing.T) {
	h := newHarness(t)
	dev := h.links[devEP1]
	for _, outside := range []netip.Addr{addr("198.51.100.77"), addr("2001:db8:203::9")} {
		dst := epPeer.v4
		if outside.Is6() {
			dst = epPeer.v6
		}
		frame := pktSpec{src: outside, dst: dst}.frame(t)
		key := ctKeyOf(layers.IPProtocolTCP, netip.AddrPortFrom(outside, 40000), netip.AddrPortFrom(dst, 80))
		rev := ctKeyOf(layers.IPProtocolTCP, netip.AddrPortFrom(dst, 80), netip.AddrPortFrom(outside, 40000))
		for _, tc := range []struct {
			name  string
			iif   int
			flags uint16
			entry *CTKey
			want  Reason
		}{
			{"unsolicited", 1, 0, nil, tcXlReasonXL_DROP_UNSOLICITED},
			{"reply of a tracked flow", 1, 0, &key, deliver},
			{"tracked flow, reversed (after DNAT)", 1, 0, &rev, deliver},
			{"network allows unsolicited", 1, EPFlagAllowUnsolicited, nil, deliver},
			{"from the node", 0, 0, nil, deliver},
		} {
			t.Run(family4or6(outside)+"/"+tc.name, func(t *testing.T) {
				h.ctFlush(t)
				h.resetMetrics(t)
				h.setPolicy(t, epPeer, 1, tc.flags)
				t.Cleanup(func() { h.setPolicy(t, epPeer, 1, 0) })
				if tc.entry != nil {
					if err := h.objs.CT().Put(tc.entry, CTVal{Dir: uint8(CTDirReply)}); err != nil {
						t.Fatal(err)
					}
					if err := h.objs.CTWritten(); err != nil {
						t.Fatal(err)
					}
				}
				ret, err := RunVerdict(h.do, h.objs.ToEndpoint(), h.objs.Metrics(),
					&ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256),
						Context: skbContext{IngressIfindex: uint32(tc.iif), Ifindex: uint32(dev)}})
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				wantRet := actPass
				if tc.want != deliver {
					wantRet = actShot
				}
				if int32(ret) != wantRet {
					t.Errorf("return value %d, want %d", int32(ret), wantRet)
				}
				wantM := map[MetricsKey]MetricsVal{metricsKey(dev, tc.want, DirIngress): {Packets: 1, Bytes: uint64(len(frame))}}
				if got := h.metrics(t); !maps.Equal(got, wantM) {
					t.Errorf("metrics: got %s\nwant %s", formatMetrics(got), formatMetrics(wantM))
				}
			})
		}
	}
}

func family4or6(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}
