package bpf

import (
	"net/netip"
	"testing"
)

// NAT ports whose flows are past their deadline but not collected yet (a
// closed flow is kept 10 s, then the GC's grace period and interval, and
// a shared backend's for its TIME_WAIT; lib/ct_nat.h ct_create_ports): a
// new flow finding no free port takes one of them, deleting the old flow
// (both entries) as the GC would; live flows still refuse it
// (pass_nat_ports, to Linux untranslated). Four ports, on the two paths
// that draw them:
//
//   - a NodePort reached from outside whose backend is another node's pod
//     (bench/peers' NodePort row refused 11.7 % of its connections at
//     12,140 conn/s): SNAT to this node's cluster address, the clash
//     range (here 30000-30003);
//   - a container's connection masqueraded to the node's address,
//     --nat-ports (here 62000-62003).
//
// Before, a port was free only once the GC had deleted its flow: every
// case with stale entries below was pass_nat_ports.
func TestNATPortReclaim(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	seedOverlay(t, h, h.links[devUp])
	clusterV4 := addr("10.244.1.0")
	peerPod := endpoint{v4: addr("10.244.2.5"), v6: addr("fd00:244:2::5")}
	h.putService(t, testService{id: 71, vip: ap(nodeV4, 30090), proto: ctTCP, backends: []endpointPort{{peerPod, 9090}}})
	c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: 62000, NatPortMax: 62003,
		ClashPortMin: 30000, ClashPortMax: 30003, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16(),
		ClusterV4: clusterV4.As16()}
	if err := h.objs.Config().Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	defer h.setNode(t, natPortMin, natPortMax)
	h.setMasquerade(t, epSrc, true)

	type path struct {
		name string
		// open sends flow i's SYN, returning the verdict and the frame's
		// length, and its original key.
		open func(t *testing.T, i int) (int32, int, CTKey)
		ok   ctMetric // how an opened flow is counted
		pass ctMetric // how a refused one is
		// reply is the reply entry's key of the flow under original key k.
		reply  func(t *testing.T, k CTKey) CTKey
		lo, hi uint16
	}
	up, ep0 := h.links[devUp], h.links[devEP0]
	// opener makes a path's open: flow i's SYN (from pkt) through prog on
	// dev; a pass leaves the frame alone.
	opener := func(prog ctProg, dev string, pkt func(i int) (ctFlow, ctPkt)) func(*testing.T, int) (int32, int, CTKey) {
		return func(t *testing.T, i int) (int32, int, CTKey) {
			f, p := pkt(i)
			ret, in, out := h.ctRun(t, prog, dev, p)
			if ret == actPass {
				wantVerdict(t, ret, actPass, in, out)
			}
			return ret, len(in), f.origKey()
		}
	}
	paths := []path{{
		name: "nodeport to another node's pod",
		open: opener(progFromUplink, devUp, func(i int) (ctFlow, ctPkt) {
			f := ctFlow{src: ap(remoteV4, uint16(42000+i)), dst: ap(nodeV4, 30090)}
			return f, f.orig("S").fromOutside()
		}),
		ok:   ctMetric{up, tcXlReasonXL_FWD_OVERLAY, DirIngress},
		pass: ctMetric{up, passNATPorts, DirIngress},
		reply: func(t *testing.T, k CTKey) CTKey {
			v, _ := h.ctLookup(k)
			to, from := bothOf(v)
			return ctKeyOf(ctTCP, to, from)
		},
		lo: 30000, hi: 30003,
	}, {
		name: "masquerade",
		open: opener(progFromEP, devEP0, func(i int) (ctFlow, ctPkt) {
			f := ctFlow{src: ap(epSrc.v4, uint16(42100+i)), dst: ap(remoteV4, 443)}
			return f, f.orig("S").sentBy(epSrc)
		}),
		ok:   ctMetric{ep0, fwdFIB, DirEgress},
		pass: ctMetric{ep0, passNATPorts, DirEgress},
		reply: func(t *testing.T, k CTKey) CTKey {
			v, _ := h.ctLookup(k)
			return ctKeyOf(ctTCP, netip.AddrPortFrom(netip.AddrFrom16(k.Daddr).Unmap(), nbo(k.Dport)),
				netip.AddrPortFrom(netip.AddrFrom16(v.NatAddr).Unmap(), nbo(v.NatPort)))
		},
		lo: 62000, hi: 62003,
	}}
	// age moves the deadline of the entries under keys into the past.
	age := func(t *testing.T, keys ...CTKey) {
		t.Helper()
		for _, k := range keys {
			v, ok := h.ctLookup(k)
			if !ok {
				t.Fatalf("no entry %v to age", k)
			}
			v.Expires = 1
			if err := h.objs.CT().Put(&k, &v); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range paths {
		// fill opens flows first..first+n-1, every one translated with a
		// port of the range, and returns their original and reply keys.
		fill := func(t *testing.T, first, n int) (origs, replies []CTKey) {
			t.Helper()
			for i := first; i < first+n; i++ {
				ret, n, k := p.open(t, i)
				if ret != actRedirect {
					t.Fatalf("flow %d: verdict %d, want a redirect", i, ret)
				}
				h.wantMetrics(t, n, p.ok)
				rk := p.reply(t, k)
				if port := nbo(rk.Dport); port < p.lo || port > p.hi {
					t.Fatalf("flow %d: reply key %v, want a port of %d-%d", i, rk, p.lo, p.hi)
				}
				origs, replies = append(origs, k), append(replies, rk)
			}
			return origs, replies
		}
		t.Run(p.name+"/a range of stale flows taken over one by one", func(t *testing.T) {
			h.ctFlush(t)
			h.metrics(t)
			o, r := fill(t, 0, 4)
			age(t, append(o, r...)...)
			for i := range 4 {
				if ret, _, _ := p.open(t, 200+i); ret != actRedirect {
					t.Fatalf("new flow %d of 4 on 4 stale ports: verdict %d, want a redirect", i, ret)
				}
			}
			if ret, _, _ := p.open(t, 204); ret != actPass {
				t.Errorf("a 5th new flow: verdict %d, want pass (the 4 new flows are live)", ret)
			}
		})
		cases := []struct {
			name string
			// before opens the range's flows and ages what the case
			// needs; want is the new flow's verdict (redirect: it gets
			// a port), gone how many old flows it deleted.
			before func(t *testing.T) (origs, replies []CTKey)
			want   int32
			gone   int
		}{{
			name: "live flows on every port: refused and counted",
			before: func(t *testing.T) ([]CTKey, []CTKey) {
				return fill(t, 0, 4)
			},
			want: actPass,
		}, {
			name: "every port's flow past its deadline: one taken over",
			before: func(t *testing.T) ([]CTKey, []CTKey) {
				o, r := fill(t, 0, 4)
				age(t, append(o, r...)...)
				return o, r
			},
			want: actRedirect, gone: 1,
		}, {
			name: "a free port comes before stale ones",
			before: func(t *testing.T) ([]CTKey, []CTKey) {
				o, r := fill(t, 0, 3)
				age(t, append(o, r...)...)
				return o, r
			},
			want: actRedirect,
		}, {
			name: "a flow alive on one side is left",
			before: func(t *testing.T) ([]CTKey, []CTKey) {
				o, r := fill(t, 0, 4)
				age(t, r...) // the reply entries only
				return o, r
			},
			want: actPass,
		}}
		for _, c := range cases {
			t.Run(p.name+"/"+c.name, func(t *testing.T) {
				h.ctFlush(t)
				h.metrics(t)
				origs, replies := c.before(t)
				ret, n, k := p.open(t, 100)
				if ret != c.want {
					t.Fatalf("new flow: verdict %d, want %d", ret, c.want)
				}
				_, tracked := h.ctLookup(k)
				if c.want == actPass {
					h.wantMetrics(t, n, p.pass)
					if tracked {
						t.Errorf("a flow without a port was tracked")
					}
				} else {
					h.wantMetrics(t, n, p.ok)
					if !tracked {
						t.Fatalf("the new flow was not tracked")
					}
					if rk := p.reply(t, k); nbo(rk.Dport) < p.lo || nbo(rk.Dport) > p.hi {
						t.Errorf("new flow's reply key %v, want a port of %d-%d", rk, p.lo, p.hi)
					}
				}
				// An old flow is there whole or not at all (its reply
				// key, taken over, is the new flow's).
				var newReply CTKey
				if tracked {
					newReply = p.reply(t, k)
				}
				gone := 0
				for i := range origs {
					_, o := h.ctLookup(origs[i])
					rv, r := h.ctLookup(replies[i])
					switch {
					case !o && (!r || replies[i] == newReply):
						gone++
					case !o || !r || rv.Dir != uint8(CTDirReply):
						t.Errorf("old flow %d: original entry %v, reply entry %v (%+v): half a flow", i, o, r, rv)
					}
				}
				if gone != c.gone {
					t.Errorf("%d old flows deleted, want %d", gone, c.gone)
				}
				if want := 2 * (len(origs) - c.gone); c.want == actRedirect {
					if got := h.ctEntryCount(t); got != want+2 {
						t.Errorf("%d entries, want %d (the old flows left and the new one)", got, want+2)
					}
				}
			})
		}
	}
}

// TestNATPortFill replays the NodePort row of bench/peers on the
// allocator alone: 12,140 connections a second for 5 s from one outside
// client, through xlane_from_uplink to another node's pod (the SNAT to
// the cluster address), none of them over yet (a closed flow keeps its
// port 10 s): new flows filling 94 % of the range, here a range of 8,192
// ports (2,048 in -short, the kernel-matrix guests; prog.Run from Go costs
// ~5 ms a run on the loaded machine). The bench refused 11.7 % of its
// connections (pass_nat_ports). The probe that walked on from one random
// start (16 tries) refused 6.2 % of the flows here, on the runs of taken
// ports its own walk built; random draws (64 tries) refuse about f^64 at
// fill f, ~0.03 % over the run. On the real range (1024-65535, 60,700
// flows): 0 refused, against 6.21 % before.
func TestNATPortFill(t *testing.T) {
	h := newHarness(t, Options{Cluster: true})
	t.Cleanup(func() { h.ctFlush(t) })
	seedOverlay(t, h, h.links[devUp])
	peerPod := endpoint{v4: addr("10.244.2.5"), v6: addr("fd00:244:2::5")}
	h.putService(t, testService{id: 72, vip: ap(nodeV4, 30091), proto: ctTCP, backends: []endpointPort{{peerPod, 9090}}})
	size := 8192
	if testing.Short() {
		size = 2048
	}
	lo, hi, flows := uint16(1024), uint16(1024+size-1), 60700*size/64512
	c := Config{UplinkIfindex: uint32(h.links[devUp]), NatPortMin: natPortMin, NatPortMax: natPortMax,
		ClashPortMin: lo, ClashPortMax: hi, UplinkV4: nodeV4.As16(), UplinkV6: nodeV6.As16(),
		ClusterV4: addr("10.244.1.0").As16()}
	if err := h.objs.Config().Put(uint32(0), &c); err != nil {
		t.Fatal(err)
	}
	defer h.setNode(t, natPortMin, natPortMax)
	h.resetMetrics(t)
	// Distinct client tuples: 40 addresses x 1,600 ports.
	refused, firstRefused := 0, -1
	var refusedLastTenth int
	for i := range flows {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + i/1600)}), uint16(20000+i%1600))
		in := ctPkt{src: client, dst: ap(nodeV4, 30091), flags: "S"}.fromOutside().frame(t)
		ret, _, err := h.runProg(h.objs.TCFromUplink(), in, h.links[devUp])
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		switch ret {
		case actRedirect:
		case actPass:
			refused++
			if firstRefused < 0 {
				firstRefused = i
			}
			if i >= flows*9/10 {
				refusedLastTenth++
			}
		default:
			t.Fatalf("flow %d: verdict %d", i, ret)
		}
	}
	n := h.metrics(t)[metricsKey(h.links[devUp], passNATPorts, DirIngress)].Packets
	pct := 100 * float64(refused) / float64(flows)
	t.Logf("%d new flows on %d ports (%.0f %% full at the end): %d refused (%.2f %%; the first at flow %d, %d in the last tenth), pass_nat_ports %d",
		flows, int(hi)-int(lo)+1, 100*float64(flows-refused)/float64(int(hi)-int(lo)+1), refused, pct, firstRefused, refusedLastTenth, n)
	if n != uint64(refused) {
		t.Errorf("pass_nat_ports counted %d, %d flows were passed", n, refused)
	}
	if pct > 0.5 {
		t.Errorf("%.2f %% of the flows refused, want at most 0.5 %%", pct)
	}
}
