package bpf

import (
	"net/netip"
	"testing"
)

// Services reached from off the node whose backend is another node's pod
// (a NodePort with Kubernetes' externalTrafficPolicy Cluster;
// docs/multinode.md), in the harness of ct_test.go with the peers of
// overlay_test.go (xl-up0 stands in for the VXLAN device):
//
//	203.0.113.9:40000 --xl-up0--> [xlane_from_uplink] 198.51.100.1:30080
//	    DNAT to 10.244.2.5:9090 (node 7's pod), SNAT to 10.244.1.0:6xxxx
//	    (this node's cluster address), tunnel key (192.0.2.7, VNI 1) --> overlay
//	10.244.2.5:9090 --> 10.244.1.0:6xxxx (the reply, natively routed) --xl-up0-->
//	    [reverse NAT] 198.51.100.1:30080 --> 203.0.113.9:40000, FIB --> gateway
//
// A local backend keeps the client's address (DNAT only); a pod of this
// node reaching the same VIP keeps its own; a backend on a peer found down
// is drop_peer_down; without a cluster address of the family the packet is
// Linux's, untranslated (pass_nat_ports).
func TestUplinkRemoteBackend(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	clusterV4, clusterV6 := addr("10.244.1.0"), addr("fd00:244:1::")
	setCluster := func(v4, v6 netip.Addr) {
		c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: natPortMin, NatPortMax: natPortMax,
			ClashPortMin: natPortMin, ClashPortMax: natPortMax, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16()}
		if v4.IsValid() {
			c.ClusterV4 = v4.As16()
		}
		if v6.IsValid() {
			c.ClusterV6 = v6.As16()
		}
		if err := h.objs.Config().Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
	}
	setCluster(clusterV4, clusterV6)
	peerPod := endpoint{v4: addr("10.244.2.5"), v6: addr("fd00:244:2::5")}
	downPod := endpoint{v4: addr("10.244.3.5"), v6: addr("fd00:244:3::5")}
	h.putService(t, testService{id: 61, vip: ap(nodeV4, 30080), proto: ctTCP, backends: []endpointPort{{peerPod, 9090}}})
	h.putService(t, testService{id: 62, vip: ap(nodeV6, 30080), proto: ctTCP, backends: []endpointPort{{peerPod, 9090}}})
	h.putService(t, testService{id: 63, vip: ap(nodeV4, 30081), proto: ctTCP, backends: []endpointPort{{epPeer, 9091}}})
	h.putService(t, testService{id: 64, vip: ap(nodeV6, 30081), proto: ctTCP, backends: []endpointPort{{epPeer, 9091}}})
	h.putService(t, testService{id: 65, vip: ap(nodeV4, 30082), proto: ctTCP, backends: []endpointPort{{downPod, 9090}}})
	up := h.links[devUp]
	fwdOverlay := tcXlReasonXL_FWD_OVERLAY

	for _, c := range []struct {
		name                 string
		client, vip, backend netip.AddrPort
		cluster              netip.Addr
	}{
		{"ipv4", ap(remoteV4, 40000), ap(nodeV4, 30080), ap(peerPod.v4, 9090), clusterV4},
		{"ipv6", ap(remoteV6, 40000), ap(nodeV6, 30080), ap(peerPod.v6, 9090), clusterV6},
	} {
		t.Run(c.name+"/backend on another node", func(t *testing.T) {
			ret, in, out := h.ctRun(t, progFromUplink, devUp, ctPkt{src: c.client, dst: c.vip, flags: "S"}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			from := h.wantBoth(t, ctTCP, c.client, c.vip, c.backend, c.cluster, natPortMin, natPortMax)
			wantFrame(t, out, ctPkt{src: from, dst: c.backend, flags: "S"}.routedTo(overlayMAC, overlaySrcMAC))
			h.wantMetrics(t, len(in), ctMetric{up, fwdOverlay, DirIngress})

			// The backend's reply, natively routed back (the overlay's
			// arrives at xlane_from_overlay, which prog.Run cannot give
			// tunnel metadata): translated back, out through the FIB.
			ret, in, out = h.ctRun(t, progFromUplink, devUp, ctPkt{src: c.backend, dst: from, flags: "SA"}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, ctPkt{src: c.vip, dst: c.client, flags: "SA"}.routedTo(gwMAC, upMAC))
			h.wantMetrics(t, len(in), ctMetric{up, fwdFIB, DirIngress})

			// The client's next packet: the established flow's way.
			ret, in, out = h.ctRun(t, progFromUplink, devUp, ctPkt{src: c.client, dst: c.vip, flags: "A"}.fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			wantFrame(t, out, ctPkt{src: from, dst: c.backend, flags: "A"}.routedTo(overlayMAC, overlaySrcMAC))
			h.wantMetrics(t, len(in), ctMetric{up, fwdOverlay, DirIngress})
			if v, _ := h.ctLookup(ctKeyOf(ctTCP, c.client, c.vip)); CTState(v.State) != ctStEst {
				t.Errorf("state %d after the handshake, want established", v.State)
			}
		})
	}
	t.Run("ipv4/local backend keeps the client's address", func(t *testing.T) {
		f := ctFlow{src: ap(remoteV4, 40001), dst: ap(nodeV4, 30081), nat: CTNatDst, to: ap(epPeer.v4, 9091)}
		ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, ctPkt{src: f.src, dst: f.to, flags: "S"}.routedTo(epPeer.mac, epPeer.hostMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
		h.wantMetrics(t, len(in), ctMetric{up, fwdPeer, DirIngress}, ctMetric{epPeer.ifindex, fwdPeer, DirIngress})
	})
	t.Run("ipv6/local backend keeps the client's address", func(t *testing.T) {
		f := ctFlow{src: ap(remoteV6, 40001), dst: ap(nodeV6, 30081), nat: CTNatDst, to: ap(epPeer.v6, 9091)}
		ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, ctPkt{src: f.src, dst: f.to, flags: "S"}.routedTo(epPeer.mac, epPeer.hostMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
	})
	t.Run("a pod of this node keeps its address", func(t *testing.T) {
		// From xl-ep0 (network 1, VNI 4242): DNAT only, tunnelled with
		// its network's VNI; the reply comes back to the pod itself.
		f := ctFlow{src: ap(epSrc.v4, 40002), dst: ap(nodeV4, 30080), nat: CTNatDst, to: ap(peerPod.v4, 9090)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, ctPkt{src: f.src, dst: f.to, flags: "S"}.routedTo(overlayMAC, overlaySrcMAC))
		h.checkFlow(t, f, ctStNew, toTCPSyn)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdOverlay, DirEgress})
	})
	t.Run("backend on a peer found down", func(t *testing.T) {
		// (Dropped after its translation: the frame is gone either way.)
		ret, in, _ := h.ctRun(t, progFromUplink, devUp, ctPkt{src: ap(remoteV4, 40003), dst: ap(nodeV4, 30082), flags: "S"}.fromOutside())
		if ret != actShot {
			t.Errorf("return value %d, want TC_ACT_SHOT", ret)
		}
		h.wantMetrics(t, len(in), ctMetric{up, tcXlReasonXL_DROP_PEER_DOWN, DirIngress})
	})
	t.Run("the cluster address takes the wide port range", func(t *testing.T) {
		// --nat-ports down to two ports: five flows from outside to the
		// peer's pod are all translated, from the cluster address with
		// ports of the clash range (no socket of the node has that
		// address). Before, the third found no port (pass_nat_ports):
		// bench/peers' NodePort row refused half its connections.
		c := Config{UplinkIfindex: uint32(up), NatPortMin: 62000, NatPortMax: 62001,
			ClashPortMin: 1024, ClashPortMax: 65535, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16(),
			ClusterV4: clusterV4.As16(), ClusterV6: clusterV6.As16()}
		if err := h.objs.Config().Put(uint32(0), &c); err != nil {
			t.Fatal(err)
		}
		defer setCluster(clusterV4, clusterV6)
		for i := range 5 {
			f := ctFlow{src: ap(remoteV4, uint16(41000+i)), dst: ap(nodeV4, 30080)}
			ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
			wantVerdict(t, ret, actRedirect, in, out)
			h.wantMetrics(t, len(in), ctMetric{up, fwdOverlay, DirIngress})
			v, ok := h.ctLookup(f.origKey())
			if !ok || CTNat(v.Nat) != CTNatBoth || netip.AddrFrom16(v.NatSaddr).Unmap() != clusterV4 {
				t.Fatalf("flow %d: entry %+v (found %v), want a DNAT+SNAT flow from the cluster address", i, v, ok)
			}
			if p := nbo(v.NatSport); p < 1024 {
				t.Errorf("flow %d: source port %d, want one of 1024-65535", i, p)
			}
		}
	})
	t.Run("no cluster address: counted pass", func(t *testing.T) {
		setCluster(netip.Addr{}, clusterV6)
		defer setCluster(clusterV4, clusterV6)
		f := ctFlow{src: ap(remoteV4, 40004), dst: ap(nodeV4, 30080)}
		ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{up, passNATPorts, DirIngress})
		if _, ok := h.ctLookup(f.origKey()); ok {
			t.Errorf("flow without a cluster address was tracked")
		}
	})
}
