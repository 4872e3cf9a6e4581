package bpf

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
)

// The conntrack stage with a full table (lib/ct.h ct_create), on the
// conntrack harness of ct_test.go.

// ---------------------------------------------------------------------------
// A full table: a four-entry xlane_ct holds two flows.

// ctEntryCount counts xlane_ct's entries with batch lookups.
func (h *harness) ctEntryCount(tb testing.TB) int {
	tb.Helper()
	keys, vals := make([]CTKey, 4096), make([]CTVal, 4096)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := h.objs.CT().BatchLookup(&cursor, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total
		}
		if err != nil {
			tb.Fatalf("count xlane_ct: %v", err)
		}
	}
}

// TestCTTableFull: with xlane_ct full, flows that need no translation are
// forwarded untracked (pass_ct_full counted under ifindex 0 besides their
// own reason); flows that need NAT go to Linux (pass_ct_full) rather than
// out untranslated; tracked flows carry on.
func TestCTTableFull(t *testing.T) {
	// Four entries: two flows fill it. Every collection must take the
	// size (xlaned --ct-size): Load sized only the tc collection's spec
	// once, and the XDP programs then failed to load, silently.
	h := newHarness(t, Options{CTSize: 4})
	if got := h.objs.CT().MaxEntries(); got != 4 {
		t.Fatalf("xlane_ct max_entries %d, want 4", got)
	}
	if err := h.objs.XDPErr(); err != nil {
		t.Fatalf("xdp programs with CTSize 4: %v", err)
	}
	max := int(h.objs.CT().MaxEntries())
	h.setNode(t, natPortMin, natPortMax)
	h.publish(t, ctTCP, 8080, ap(epNoFwd.v4, 80))
	h.putService(t, testService{id: 31, vip: ap(addr("10.96.0.10"), 80), proto: ctTCP, backends: []endpointPort{{epNoFwd, 8080}}})

	// Fill it: one masqueraded flow, one plain one.
	h.setMasquerade(t, epSrc, true)
	masq := ctFlow{src: ap(epSrc.v4, 40000), dst: ap(remoteV4, 80)}
	if ret, _, _ := h.ctRun(t, progFromEP, devEP0, masq.orig("S").sentBy(epSrc)); ret != actRedirect {
		t.Fatalf("masquerade flow: ret %d", ret)
	}
	v, ok := h.ctLookup(masq.origKey())
	if !ok {
		t.Fatal("masquerade flow not tracked")
	}
	masq.nat, masq.to = CTNatSrc, ap(nodeV4, nbo(v.NatPort))
	plain := ctFlow{src: ap(epSrc.v4, 40001), dst: ap(epPeer.v4, 80)}
	if ret, _, _ := h.ctRun(t, progFromEP, devEP0, plain.orig("S").sentBy(epSrc)); ret != actRedirect {
		t.Fatalf("plain flow: ret %d", ret)
	}
	if n := h.ctEntryCount(t); n != max {
		t.Fatalf("%d entries, want %d (full)", n, max)
	}

	t.Run("untranslated local flow is forwarded, counted under ifindex 0", func(t *testing.T) {
		f := ctFlow{src: ap(epSrc.v4, 40002), dst: ap(epPeer.v4, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(epPeer.mac, epPeer.hostMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdPeer, DirEgress}, ctMetric{epPeer.ifindex, fwdPeer, DirIngress},
			ctMetric{0, passCTFull, DirEgress})
	})
	t.Run("untranslated routed flow is forwarded, counted under ifindex 0", func(t *testing.T) {
		h.setMasquerade(t, epSrc, false)
		defer h.setMasquerade(t, epSrc, true)
		f := ctFlow{src: ap(epSrc.v6, 40003), dst: ap(remoteV6, 80)}
		p := f.orig("S").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.routedTo(gwMAC, upMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress}, ctMetric{0, passCTFull, DirEgress})
	})
	for _, c := range []struct {
		name string
		f    ctFlow
	}{
		{"new masquerade flow goes to Linux, not out untranslated", ctFlow{src: ap(epSrc.v4, 40004), dst: ap(remoteV4, 80)}},
		{"new published-port flow goes to Linux", ctFlow{src: ap(epSrc.v4, 40005), dst: ap(nodeV4, 8080)}},
		{"new service flow goes to Linux", ctFlow{src: ap(epSrc.v4, 40006), dst: ap(addr("10.96.0.10"), 80)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ret, in, out := h.ctRun(t, progFromEP, devEP0, c.f.orig("S").sentBy(epSrc))
			wantVerdict(t, ret, actPass, in, out)
			h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], passCTFull, DirEgress})
		})
	}
	t.Run("new published-port flow from outside goes to Linux", func(t *testing.T) {
		f := ctFlow{src: ap(remoteV4, 40007), dst: ap(nodeV4, 8080)}
		ret, in, out := h.ctRun(t, progFromUplink, devUp, f.orig("S").fromOutside())
		wantVerdict(t, ret, actPass, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devUp], passCTFull, DirIngress})
	})
	t.Run("tracked flows still translate", func(t *testing.T) {
		p := masq.orig("A").sentBy(epSrc)
		ret, in, out := h.ctRun(t, progFromEP, devEP0, p)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, p.translated(CTNatSrc, masq.to).routedTo(gwMAC, upMAC))
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
		rp := masq.reply("A").fromOutside()
		ret, in, out = h.ctRun(t, progFromUplink, devUp, rp)
		wantVerdict(t, ret, actRedirect, in, out)
		wantFrame(t, out, rp.translated(CTNatDst, masq.src).routedTo(epSrc.mac, epSrc.hostMAC))
		h.checkFlow(t, masq, ctStEst, toTCPEst)
	})
	t.Run("room again after a flow goes", func(t *testing.T) {
		for _, k := range []CTKey{plain.origKey(), plain.replyKey()} {
			if err := h.objs.CT().Delete(&k); err != nil {
				t.Fatalf("delete %v: %v", k, err)
			}
		}
		f := ctFlow{src: ap(epSrc.v4, 40004), dst: ap(remoteV4, 80)}
		ret, in, out := h.ctRun(t, progFromEP, devEP0, f.orig("S").sentBy(epSrc))
		wantVerdict(t, ret, actRedirect, in, out)
		h.wantMetrics(t, len(in), ctMetric{h.links[devEP0], fwdFIB, DirEgress})
		if n := h.ctEntryCount(t); n != max {
			t.Errorf("%d entries, want %d", n, max)
		}
		if _, ok := h.ctLookup(f.origKey()); !ok {
			t.Errorf("new flow not tracked")
		}
	})
}
