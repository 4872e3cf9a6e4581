package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/datapath"
)

// The neighbour mirror survives a burst that overflows its netlink socket:
// thousands of entries flushed at once (the link going down) used to end
// the subscription for good (ENOBUFS), after which a next hop's new MAC
// never reached xlane_neigh. Now the mirror resubscribes, resyncs, and
// follows the change.
// With a small socket buffer the burst overflows it and the mirror must
// resync.
func TestNeighMirrorSurvivesBurst(t *testing.T) {
	t.Run("default buffer", func(t *testing.T) { neighBurst(t, false) })
	t.Run("overflowing buffer", func(t *testing.T) {
		old := neighRcvbuf
		neighRcvbuf = 64 << 10
		t.Cleanup(func() { neighRcvbuf = old })
		neighBurst(t, true)
	})
}

// inMirror runs fn inside a fresh network namespace (the "node") with a
// BPF datapath whose pins are private to the test and a neighbour mirror
// feeding it, as xlaned starts them.
func inMirror(t *testing.T, fn func(dp datapath.Datapath, m *Neighbours)) {
	t.Helper()
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	pinDir := fmt.Sprintf("/sys/fs/bpf/xlt-neigh-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	err = node.Do(func(ns.NetNS) error {
		dp, err := datapath.Open(pinDir, datapath.Options{})
		if err != nil {
			return err
		}
		defer dp.Close()
		done := make(chan struct{})
		defer close(done)
		var m Neighbours
		if err := m.Start(dp, slog.New(slog.DiscardHandler), done); err != nil {
			return err
		}
		fn(dp, &m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func neighBurst(t *testing.T, mustResync bool) {
	inMirror(t, func(dp datapath.Datapath, m *Neighbours) {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nb0"}, PeerName: "nb0p"}
		if err := netlink.LinkAdd(v); err != nil {
			t.Fatal(err)
		}
		link, _ := netlink.LinkByName("nb0")
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		ifindex := link.Attrs().Index
		mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0x10, b} }
		// 3,000 entries per family, then all 6,000 deleted at once: far
		// past a default-sized socket buffer.
		for i := 0; i < 3000; i++ {
			for _, ip := range []net.IP{
				net.IPv4(10, 200, byte(i>>8), byte(i)),
				net.ParseIP("fd00:200::").To16(),
			} {
				ip = append(net.IP(nil), ip...)
				if ip.To4() == nil {
					ip[14], ip[15] = byte(i>>8), byte(i)
				}
				n := &netlink.Neigh{LinkIndex: ifindex, State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: mac(1)}
				if err := netlink.NeighAdd(n); err != nil {
					t.Fatalf("neigh add %s: %v", ip, err)
				}
			}
		}
		if err := netlink.LinkSetDown(link); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		hop := netip.MustParseAddr("10.201.0.1")
		for _, want := range []net.HardwareAddr{mac(0xa), mac(0xb)} { // a router replaced
			n := &netlink.Neigh{LinkIndex: ifindex, State: netlink.NUD_PERMANENT, IP: hop.AsSlice(), HardwareAddr: want}
			if err := netlink.NeighSet(n); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, ok, err := dp.Neigh(hop, ifindex)
				if err != nil {
					t.Fatal(err)
				}
				if ok && bytes.Equal(got, want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("xlane_neigh %s = %v (present %v), want %v; mirror %+v", hop, got, ok, want, m.Status())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		st := m.Status()
		t.Logf("mirror after the burst: %+v", *st)
		if mustResync && st.Resyncs == 0 {
			t.Errorf("the burst overflowed a 64 KiB socket but the mirror never resynced: %+v", *st)
		}
		if st.Events == 0 {
			t.Errorf("status shows no mirrored events: %+v", *st)
		}
	})
}
