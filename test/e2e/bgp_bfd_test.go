package e2e

import (
	"encoding/json"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// frrBFDPeer is one session of FRR's `show bfd peers json`.
type frrBFDPeer struct {
	Peer     string `json:"peer"`
	Local    string `json:"local"`
	Status   string `json:"status"`
	RemoteID uint32 `json:"remote-id"`
}

// bfdUp says whether FRR's BFD session with peer is up.
func (f *frr) bfdUp(peer netip.Addr) bool { return f.bfdPeers()[peer.String()].Status == "up" }

// bfdPeers is FRR's BFD sessions (bfdd), by peer address.
func (f *frr) bfdPeers() map[string]frrBFDPeer {
	f.t.Helper()
	out := f.vtysh("show bfd peers json")
	var ps []frrBFDPeer
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		f.t.Fatalf("show bfd peers json: %v: %s", err, out)
	}
	m := map[string]frrBFDPeer{}
	for _, p := range ps {
		m[p.Peer] = p
	}
	return m
}

// TestBGPBFD: BFD between xlaned (GoBGP's, `xlane bgp peer add --bfd`)
// and FRR's bfdd on both sessions (IPv4, IPv6) of a node: the BFD
// sessions come up on both ends and stay up with the BGP sessions (no
// flap: FRR replaces its BFD session when the BGP session comes up, which
// reset GoBGP's, internal/bgp/bfd.go), a lost node is noticed by BFD
// (withdrawn in about 3 s, well inside the 9 s hold time), when the link
// comes back BFD and BGP come back up and the routes return, and kill -9
// of xlaned still leaves the routes stale (graceful restart; BIRD drops
// them instead: TestBGPBFDBird).
func TestBGPBFD(t *testing.T) {
	skipInMatrixGuest(t, "FRR is not in the guests")
	testBGPBFD(t, false)
}

// TestBGPBFDBird: TestBGPBFD with BIRD 2 as the router (`bfd on`, its
// protocol bfd).
func TestBGPBFDBird(t *testing.T) {
	skipInMatrixGuest(t, "BIRD is not in the guests")
	testBGPBFD(t, true)
}

func testBGPBFD(t *testing.T, bird bool) {
	r := newBGPRackOpts(t, bgpRackOpts{n: 1, bfd: true, bird: bird})
	bfdUp := func(a netip.Addr) bool {
		if bird {
			return r.bird.bfdUp(a)
		}
		return r.frr.bfdUp(a)
	}
	r.waitEstablished(t)
	n1 := r.nodes[0]
	peers := func() []api.BGPPeerStatus {
		var st api.BGPStatus
		n1.mustXlane(&st, "bgp", "status")
		return st.Peers
	}
	// Both ends' BFD up, every BGP session established.
	allUp := func() (bool, string) {
		ok := true
		var why string
		for _, p := range peers() {
			if p.State != "established" || p.BFDState != "up" {
				ok = false
				why += " node: " + p.Address.String() + " " + p.State + " bfd " + p.BFDState + " (" + p.LastDown + ")"
			}
		}
		for _, a := range []netip.Addr{n1.under4, n1.under6} {
			if !bfdUp(a) {
				ok = false
				why += " router: bfd " + a.String() + " not up"
			}
		}
		return ok, why
	}
	waitBFD := func(timeout time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		var why string
		for ok := false; !ok; time.Sleep(200 * time.Millisecond) {
			if ok, why = allUp(); ok {
				break
			}
			if time.Since(start) > timeout {
				t.Fatalf("BFD and BGP not all up after %s:%s\n%s", timeout, why, r.router.summary())
			}
		}
		return time.Since(start)
	}
	waitBFD(20 * time.Second)
	flaps := map[netip.Addr]uint32{}
	for _, p := range peers() {
		flaps[p.Address] = p.Flaps
	}

	// Stays up: GoBGP's and FRR's detection times are 3 s; 8 s more with
	// no flap.
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if ok, why := allUp(); !ok {
			t.Fatalf("BFD or BGP went down while the link was up:%s", why)
		}
	}
	for _, p := range peers() {
		if p.Flaps != flaps[p.Address] {
			t.Errorf("peer %s flapped %d times with BFD on", p.Address, p.Flaps-flaps[p.Address])
		}
	}
	waitRoute(t, r.router, n1.pod4, 5*time.Second, n1.under4.String())
	waitRoute(t, r.router, n1.pod6, 5*time.Second, n1.under6.String())

	// The node lost: its bridge port stops forwarding (no carrier
	// change on either end, which FRR would notice at once): BFD notices
	// before the hold time (9 s) would.
	// A second port keeps the bridge's carrier (the router's address
	// there) while p1 stops.
	runIn(t, r.tor, "ip", "link", "add", "keep0", "type", "veth", "peer", "name", "keep1")
	runIn(t, r.tor, "ip", "link", "set", "keep0", "master", "br0", "up")
	runIn(t, r.tor, "ip", "link", "set", "keep1", "up")
	start := time.Now()
	runIn(t, r.tor, "bridge", "link", "set", "dev", "p1", "state", "0")
	waitRoute(t, r.router, n1.pod4, 15*time.Second)
	took := time.Since(start)
	waitRoute(t, r.router, n1.pod6, 5*time.Second)
	t.Logf("node lost → its routes withdrawn after %s (BFD 3 x 1 s; hold time 9 s)", took)
	if took < 2*time.Second || took > 6*time.Second {
		t.Errorf("withdrawn %s after the node was lost: want BFD's detection time, ~3 s (not the 9 s hold time)", took)
	}
	if bfdUp(n1.under4) {
		t.Errorf("router's BFD session with %s still up after the link went down", n1.under4)
	}

	// Back: BFD and BGP come up again and stay, the routes return.
	start = time.Now()
	runIn(t, r.tor, "bridge", "link", "set", "dev", "p1", "state", "3")
	waitRoute(t, r.router, n1.pod4, 30*time.Second, n1.under4.String())
	waitRoute(t, r.router, n1.pod6, 30*time.Second, n1.under6.String())
	back := time.Since(start)
	waitBFD(20 * time.Second)
	t.Logf("link back → routes back after %s; BFD up on both ends after %s", back, time.Since(start))
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if ok, why := allUp(); !ok {
			t.Fatalf("BFD or BGP went down after the link came back:%s", why)
		}
	}

	// kill -9: BFD goes down with xlaned (its C bit is clear) and FRR
	// ends the session, yet graceful restart still keeps the routes, stale,
	// past BFD's detection time, until the restarted xlaned refreshes them.
	// BIRD, though, takes BFD down for a forwarding failure (RFC 5882:
	// the C bit is clear) and drops them.
	start = time.Now()
	n1.stop(syscall.SIGKILL)
	if bird {
		waitRoute(t, r.router, n1.pod4, 15*time.Second)
		t.Logf("kill -9 → BIRD withdrew the routes after %s (BFD down ends graceful restart)", time.Since(start))
	} else {
		kept := n1.under4.String() + " (stale)"
		waitRoute(t, r.router, n1.pod4, 15*time.Second, kept)
		time.Sleep(4 * time.Second)
		if got := r.router.nextHops(n1.pod4); !slices.Equal(got, []string{kept}) {
			t.Fatalf("router: %s → %q after kill -9 and BFD's detection time, want kept as stale", n1.pod4, got)
		}
	}
	n1.start()
	waitRoute(t, r.router, n1.pod4, 30*time.Second, n1.under4.String())
	waitBFD(20 * time.Second)
}
