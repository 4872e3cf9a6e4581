package e2e

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// A guest with a 2-queue virtio-net on a multi-queue VM endpoint:
//
//	container c1 [veth] --tc--> node --tc--> [tap xlv... multi_queue, 2 queues] QEMU queues=2 (guest: ethtool -L eth0 combined 2)
//
// The guest turns both queue pairs on, gets its address by DHCP, pings
// the container and opens 16 TCP connections to an echo server there
// (each 4 KiB echoed); flows spread over the queues by hash, and every
// queue must have carried packets both ways (the guest driver's per-queue
// counters), so both of the tap's queues feed the pipeline and take its
// output.
func TestVMGuestMultiQueue(t *testing.T) {
	skipInMatrixGuest(t, "it can run no nested QEMU guest")
	mqGuest(t, "", "10.87.0", "52:54:00:87:00:01")
}

// mqGuest runs the 2-queue guest on a VM endpoint of a fresh node: a tap,
// or with qemu set (a QEMU with af-xdp) an AF_XDP port. net is the
// network's /24 prefix ("10.87.0").
func mqGuest(t *testing.T, qemu, net24, mac string) {
	t.Helper()
	const queues, flows = 2, 16
	start := time.Now()
	img, guest := guestImage(t)
	var n *node
	vmArgs := []string{"--queues", strconv.Itoa(queues)}
	if qemu != "" {
		n = newNode(t, func(n *node) { n.flags = append(n.flags, "--qemu", qemu) })
		vmArgs = append(vmArgs, "--backend", "af-xdp")
	} else {
		n = newNode(t)
	}
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "vmq", "--subnet", net24+".0/24", "--mode", "tc", "--masquerade=false")
	c1 := newNetns(t, "c")
	var ctr api.EndpointInfo
	n.mustXlane(&ctr, "endpoint", "add", "vmq", "--netns", c1)
	var ep api.EndpointInfo
	n.mustXlane(&ep, append([]string{"endpoint", "add", "vmq", "--vm", "--id", "vmq1", "--mac", mac}, vmArgs...)...)
	args := strings.Join(ep.QEMUArgs, " ")
	if !strings.Contains(args, fmt.Sprintf(",queues=%d", queues)) || !strings.Contains(args, fmt.Sprintf(",mq=on,vectors=%d", 2*queues+2)) {
		t.Fatalf("%d-queue endpoint: qemu args %q, want queues=%d and mq=on,vectors=%d", queues, args, queues, 2*queues+2)
	}
	dev := ep.HostIf
	if qemu != "" {
		dev = ep.PeerIf // the port QEMU binds to; both veth ends have the queues
	}
	if qemu == "" {
		if d := runIn(t, n.netns, "ip", "-d", "link", "show", dev); !strings.Contains(d, "multi_queue") {
			t.Fatalf("tap %s: want multi_queue:\n%s", dev, d)
		}
	} else {
		for _, d := range []string{ep.HostIf, ep.PeerIf} {
			want := fmt.Sprintf("numtxqueues %d numrxqueues %d", queues, queues)
			if l := runIn(t, n.netns, "ip", "-d", "link", "show", d); !strings.Contains(l, want) {
				t.Fatalf("%s: want %s:\n%s", d, want, l)
			}
		}
	}

	// The echo server: every connection gets back what it sent.
	peer := ctr.IPs[0]
	ln := listenIn(t, c1, netip.AddrPortFrom(peer, 7002))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				io.Copy(c, c)
			}(c)
		}
	}()
	lines := runGuest(t, n, img, guest, qemu, ep, []string{"-peer", peer.String(), "-queues", strconv.Itoa(queues),
		"-echo", netip.AddrPortFrom(peer, 7002).String(), "-flows", strconv.Itoa(flows)})
	if want := fmt.Sprintf("%s/24 router %s.1", ep.IPs[0], net24); !strings.HasPrefix(lines["dhcp"], want) {
		t.Errorf("guest's DHCP lease %q, want %s", lines["dhcp"], want)
	}
	if lines["flows"] != fmt.Sprintf("%d ok", flows) {
		t.Errorf("guest's echo flows: %q, want %d ok", lines["flows"], flows)
	}
	for q := 0; q < queues; q++ {
		var rx, tx uint64
		if _, err := fmt.Sscanf(lines[fmt.Sprintf("queue %d", q)], "rx %d tx %d", &rx, &tx); err != nil || rx == 0 || tx == 0 {
			t.Errorf("guest's queue %d: %q (%v), want packets both ways", q, lines[fmt.Sprintf("queue %d", q)], err)
		}
	}
	if _, ok := lines[fmt.Sprintf("queue %d", queues)]; ok {
		t.Errorf("guest has a queue %d: want %d queues", queues, queues)
	}
	var got api.EndpointInfo
	n.mustXlane(&got, "endpoint", "inspect", "vmq1")
	if c := reason(got, "fwd_peer", "from_endpoint"); c.Bytes < flows*4096 {
		t.Errorf("fwd_peer = %d bytes, want the guest's %d flows of 4 KiB on the fast path", c.Bytes, flows)
	}
	if qemu != "" {
		if c := reason(got, "fwd_xsk", "to_endpoint"); c.Bytes < flows*4096 {
			t.Errorf("fwd_xsk = %d bytes, want the echoes (%d x 4 KiB) into QEMU's sockets", c.Bytes, flows)
		}
	}
	n.mustXlane(nil, "endpoint", "rm", "vmq1")
	n.mustXlane(nil, "endpoint", "rm", ctr.ID)
	n.mustXlane(nil, "network", "rm", "vmq")
	assertCleanNamed(t, n, net24+".")
	t.Logf("%d-queue VM endpoint test: %v in all", queues, time.Since(start).Round(time.Millisecond))
}
