package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
)

// afxdpQEMUEnv names the QEMU with af-xdp that `make test-vm-afxdp` built
// (scripts/qemu-afxdp.sh); set, the test fails rather than skips without it.
const afxdpQEMUEnv = "XLANE_QEMU_AFXDP"

// afxdpQEMU returns the QEMU with af-xdp to run, or skips (saying how to
// get one) when none was built on this machine and none was asked for.
func afxdpQEMU(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(afxdpQEMUEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", afxdpQEMUEnv, p, err)
		}
		return p
	}
	p := "/var/cache/xlane/qemu-afxdp/bin/qemu-system-x86_64"
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no QEMU with af-xdp on this machine (%v): make test-vm-afxdp builds one (scripts/qemu-afxdp.sh) and runs this test", err)
	}
	return p
}

// The guest of TestVMGuest on an AF_XDP port:
//
//	container c1 [veth] --tc--> node --tc--> [xlh... ==veth== xlc... XDP->XSK] QEMU -netdev af-xdp (guest)
//
// xlane creates the pair, attaches the tc programs to the host end and its
// XDP program with a pinned socket map to the port end; QEMU binds its
// AF_XDP socket to the port with inhibit=on,map-path= (it loads nothing).
// The port survives kill -9 of xlaned; the guest gets its address by DHCP,
// pings the container and moves SHA-256-checked data both ways through a
// service VIP; its spoofed UDP is dropped. Frames for the guest are
// counted as fwd_xsk on the port. Removing the endpoint leaves no device
// and no pin.
func TestVMGuestAFXDP(t *testing.T) {
	skipInMatrixGuest(t, "it can run no nested QEMU guest")
	qemu := afxdpQEMU(t)
	start := time.Now()
	img, guest := guestImage(t)

	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--qemu", qemu) })
	requireMode(t, n, "tc")
	var st api.Status
	n.mustXlane(&st, "status")
	if !st.VM.AFXDP || st.VM.AFXDPReason != "" || !strings.Contains(strings.Join(st.VM.Backends, ","), "af-xdp") {
		t.Fatalf("status vm %+v: want af-xdp offered with %s", st.VM, qemu)
	}
	n.mustXlane(nil, "network", "create", "vmx", "--subnet", "10.86.0.0/24", "--mode", "tc", "--masquerade=false")
	c1 := newNetns(t, "c")
	var ctr api.EndpointInfo
	n.mustXlane(&ctr, "endpoint", "add", "vmx", "--netns", c1)
	const mac = "52:54:00:86:00:01"
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "vmx", "--vm", "--backend", "af-xdp", "--id", "vmx1", "--mac", mac)
	mapPin := filepath.Join(n.pinDir, "vmports", ep.PeerIf+"_xsks")
	wantArgs := fmt.Sprintf("-netdev af-xdp,id=n0,ifname=%s,inhibit=on,map-path=%s -device virtio-net-pci,netdev=n0,mac=%s", ep.PeerIf, mapPin, mac)
	if got := strings.Join(ep.QEMUArgs, " "); !ep.AFXDP() || got != wantArgs {
		t.Fatalf("af-xdp endpoint %+v:\nqemu args %q, want %q", ep, got, wantArgs)
	}
	if d := runIn(t, n.netns, "ip", "-d", "link", "show", ep.PeerIf); !strings.Contains(d, "prog/xdp") && !strings.Contains(d, "xdp") {
		t.Fatalf("port %s: want xlane's XDP program:\n%s", ep.PeerIf, d)
	}
	// Kernel mode cannot feed the sockets: refused, naming why.
	if _, stderr, err := n.xlane("network", "update", "vmx", "--mode", "kernel"); err == nil || !strings.Contains(stderr, "AF_XDP port needs mode tc") {
		t.Errorf("kernel mode under an AF_XDP port: err %v, stderr %q", err, stderr)
	}
	// The port, its program and map outlive the daemon.
	n.stop(syscall.SIGKILL)
	n.start()
	var again api.EndpointInfo
	n.mustXlane(&again, "endpoint", "inspect", "vmx1")
	// Waiting for QEMU, or unknown where the kernel cannot list AF_XDP
	// sockets (no CONFIG_XDP_SOCKETS_DIAG, as this machine's 6.18).
	waiting := strings.HasPrefix(again.State, "waiting for QEMU") ||
		strings.Contains(strings.Join(again.Notes, "\n"), "cannot list AF_XDP sockets")
	if again.PeerIf != ep.PeerIf || !strings.Contains(strings.Join(again.Datapath, ","), "xdp/vmport on "+ep.PeerIf) || !waiting {
		t.Fatalf("after kill -9: endpoint %+v, want the same port with its program, waiting for QEMU", again)
	}

	vip := netip.MustParseAddrPort("10.96.86.10:80")
	n.mustXlane(nil, "service", "create", "vmxsvc", "--vip", vip.String()+"/tcp", "--backend", netip.AddrPortFrom(ctr.IPs[0], 7000).String())
	lines := guestTraffic(t, n, guestRun{img: img, bin: guest, qemu: qemu, ep: ep, ctr: ctr, c1: c1, vip: vip, spoof: "10.86.0.250"})
	if want := fmt.Sprintf("%s/24 router 10.86.0.1 server 10.86.0.1", ep.IPs[0]); !strings.HasPrefix(lines["dhcp"], want) {
		t.Errorf("guest's DHCP lease %q, want %s", lines["dhcp"], want)
	}
	if lines["ping "+ctr.IPs[0].String()] != "ok" {
		t.Errorf("guest's ping %s: %q", ctr.IPs[0], lines["ping "+ctr.IPs[0].String()])
	}
	var got api.EndpointInfo
	n.mustXlane(&got, "endpoint", "inspect", "vmx1")
	if c := reason(got, "drop_spoofed", "from_endpoint"); c.Packets < 10 {
		t.Errorf("drop_spoofed = %d packets, want the guest's 10 spoofed datagrams", c.Packets)
	}
	// No vnet headers on AF_XDP: the guest sends MTU-sized frames.
	if c := reason(got, "fwd_peer", "from_endpoint"); c.Bytes < 1<<20 {
		t.Errorf("fwd_peer = %d bytes, want the guest's 1 MiB on the fast path", c.Bytes)
	}
	if c := reason(got, "fwd_xsk", "to_endpoint"); c.Bytes < 1<<20 {
		t.Errorf("fwd_xsk = %d bytes, want the container's 1 MiB into QEMU's socket", c.Bytes)
	}
	t.Logf("inspect after the guest: state %q, notes %q, reasons %+v", got.State, got.Notes, got.Reasons)

	n.mustXlane(nil, "service", "rm", "vmxsvc")
	n.mustXlane(nil, "endpoint", "rm", "vmx1")
	for _, dev := range []string{ep.HostIf, ep.PeerIf} {
		if err := inNS(n.netns, "ip", "link", "show", dev).Run(); err == nil {
			t.Errorf("%s still there after endpoint rm", dev)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(n.pinDir, "vmports")); len(ents) != 0 {
		t.Errorf("pins left in vmports/: %v", ents)
	}
	n.mustXlane(nil, "endpoint", "rm", ctr.ID)
	n.mustXlane(nil, "network", "rm", "vmx")
	assertCleanNamed(t, n, "10.86.")
	t.Logf("AF_XDP VM endpoint test: %v in all", time.Since(start).Round(time.Millisecond))
}

// A 2-queue AF_XDP port without a guest: the test stands in for QEMU and
// binds one AF_XDP socket per queue of the port, put at its queue's slot
// of xlane's pinned map, as QEMU's queues=2 does (QEMU 10.2.2 itself
// receives only on its last queue: docs/vm.md).
//
//	container c1 <--tc--> xlh... ==veth, 2 queues== xlc... [XDP xlane_xdp_to_vm] <--> XSK queue 0, XSK queue 1
//
// Each socket sends a UDP datagram from the guest's address: both reach
// the container (each queue feeds the pipeline). The container sends 32
// flows to the guest: they spread over the veth's queues by hash and each
// socket receives some (each queue's frames go to its own socket).
func TestVMPortMultiQueue(t *testing.T) {
	skipInMatrixGuest(t, "it can run no QEMU that offers af-xdp")
	qemu := afxdpQEMU(t)
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--qemu", qemu) })
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "vmp", "--subnet", "10.89.0.0/24", "--mode", "tc", "--masquerade=false")
	c1 := newNetns(t, "c")
	var ctr api.EndpointInfo
	n.mustXlane(&ctr, "endpoint", "add", "vmp", "--netns", c1)
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "vmp", "--vm", "--backend", "af-xdp", "--queues", "2", "--id", "vmp1", "--mac", "52:54:00:89:00:01")
	for _, d := range []string{ep.HostIf, ep.PeerIf} {
		if l := runIn(t, n.netns, "ip", "-d", "link", "show", d); !strings.Contains(l, "numtxqueues 2 numrxqueues 2") {
			t.Fatalf("%s: want 2 queues each way:\n%s", d, l)
		}
	}
	if l := runIn(t, n.netns, "ip", "link", "show", ep.PeerIf); !strings.Contains(l, "xdp") {
		t.Fatalf("port %s: want xlane's XDP program:\n%s", ep.PeerIf, l)
	}
	xsks, err := ebpf.LoadPinnedMap(filepath.Join(n.pinDir, "vmports", ep.PeerIf+"_xsks"), nil)
	if err != nil {
		t.Fatalf("the port's socket map: %v", err)
	}
	defer xsks.Close()

	// QEMU's part: one socket per queue, in the map at the queue's index.
	var socks [2]*xsk
	err = ns.WithNetNSPath(nsPath(n.netns), func(ns.NetNS) error {
		l, err := netlink.LinkByName(ep.PeerIf)
		if err != nil {
			return err
		}
		for q := range socks {
			if socks[q], err = openXSK(l.Attrs().Index, q); err != nil {
				return err
			}
			if err := xsks.Put(uint32(q), uint32(socks[q].fd)); err != nil {
				return fmt.Errorf("put queue %d's socket: %w", q, err)
			}
		}
		return nil
	})
	defer func() {
		for _, s := range socks {
			if s != nil {
				s.close()
			}
		}
	}()
	if err != nil {
		t.Fatalf("sockets on %s: %v", ep.PeerIf, err)
	}

	// Guest to container, one datagram from each queue.
	guestMAC, _ := net.ParseMAC(ep.MAC)
	gwMAC, _ := net.ParseMAC(ep.HostMAC)
	srv, cli := udpPair(t, c1, c1, netip.AddrPortFrom(ctr.IPs[0], 7003))
	cli.Close()
	defer srv.Close()
	for q, s := range socks {
		f := udpFrame(t, guestMAC, gwMAC, ep.IPs[0], ctr.IPs[0], 7003, []byte(fmt.Sprintf("from queue %d", q)))
		if err := s.send(f); err != nil {
			t.Fatalf("queue %d: %v", q, err)
		}
	}
	got := map[string]bool{}
	buf := make([]byte, 64)
	for len(got) < len(socks) {
		srv.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := srv.Read(buf)
		if err != nil {
			t.Fatalf("container received %v of the datagrams from both queues: %v", got, err)
		}
		got[string(buf[:k])] = true
	}

	// Container to guest: 32 flows, each socket must get some of them.
	err = ns.WithNetNSPath(nsPath(c1), func(ns.NetNS) error {
		for i := 0; i < 32; i++ {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ep.IPs[0], uint16(9000+i))))
			if err != nil {
				return err
			}
			c.Write([]byte("to the guest"))
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("send to the guest: %v", err)
	}
	for q, s := range socks {
		frames := 0
		for _, f := range s.recv(2 * time.Second) {
			if len(f) >= 34 && netip.AddrFrom4([4]byte(f[30:34])) == ep.IPs[0] {
				frames++
			}
		}
		if frames == 0 {
			t.Errorf("queue %d's socket received none of the 32 flows for the guest", q)
		}
		t.Logf("queue %d: %d frames for the guest", q, frames)
	}
	var info api.EndpointInfo
	n.mustXlane(&info, "endpoint", "inspect", "vmp1")
	if c := reason(info, "fwd_xsk", "to_endpoint"); c.Packets < 32 {
		t.Errorf("fwd_xsk = %d packets, want the 32 flows into the sockets", c.Packets)
	}
	if c := reason(info, "fwd_peer", "from_endpoint"); c.Packets < 2 {
		t.Errorf("fwd_peer = %d packets, want the 2 datagrams from the sockets", c.Packets)
	}
	n.mustXlane(nil, "endpoint", "rm", "vmp1")
	n.mustXlane(nil, "endpoint", "rm", ctr.ID)
	n.mustXlane(nil, "network", "rm", "vmp")
	assertCleanNamed(t, n, "10.89.")
}
