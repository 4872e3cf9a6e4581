package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/test/vm"
)

// A real QEMU guest (the kernel matrix's Debian kernel and initramfs, TCG)
// on a VM endpoint:
//
//	container c1 [veth] --tc--> node --tc--> [tap xlv...] QEMU guest (vmguest)
//
// The tap survives kill -9 of xlaned; the guest gets its address from
// xlaned's DHCP servers (v4 and v6), pings the container, one on another
// network and a host outside the node (masquerade) and moves SHA-256-checked data both ways over TCP with the first
// through a service VIP; UDP it sends from an address it does not own
// is dropped (drop_spoofed) and never reaches the container. Removing the
// endpoint leaves no tap.
func TestVMGuest(t *testing.T) {
	skipInMatrixGuest(t, "it can run no nested QEMU guest")
	start := time.Now()
	img, guest := guestImage(t)

	var outside string
	n := newNode(t, withOutsideRoutes(&outside, "1500", false)) // uplink_test.go
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "vmn", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64", "--mode", "tc")
	c1 := newNetns(t, "c")
	var ctr api.EndpointInfo
	n.mustXlane(&ctr, "endpoint", "add", "vmn", "--netns", c1)
	const mac = "52:54:00:84:00:01"
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "vmn", "--vm", "--id", "vm1", "--mac", mac)
	if !ep.VM || ep.MAC != mac || len(ep.IPs) != 2 || !strings.HasPrefix(ep.HostIf, "xlv") {
		t.Fatalf("VM endpoint %+v: want a tap xlv..., mac %s, an address per family", ep, mac)
	}
	wantArgs := fmt.Sprintf("-netdev tap,id=n0,ifname=%s,script=no,downscript=no,vhost=off -device virtio-net-pci,netdev=n0,mac=%s", ep.HostIf, mac)
	if got := strings.Join(ep.QEMUArgs, " "); got != wantArgs {
		t.Fatalf("qemu args %q, want %q", got, wantArgs)
	}
	if d := runIn(t, n.netns, "ip", "-d", "link", "show", ep.HostIf); !strings.Contains(d, "tun type tap") || !strings.Contains(d, "vnet_hdr on") {
		t.Fatalf("tap %s: want a persistent tap with vnet_hdr:\n%s", ep.HostIf, d)
	}
	// Multi-queue: the tap and QEMU's options agree on the queue count.
	var mq api.EndpointInfo
	n.mustXlane(&mq, "endpoint", "add", "vmn", "--vm", "--id", "vm2", "--queues", "4")
	if a := strings.Join(mq.QEMUArgs, " "); !strings.Contains(a, ",queues=4") || !strings.Contains(a, ",mq=on,vectors=10") {
		t.Errorf("4-queue endpoint: qemu args %q", a)
	}
	if d := runIn(t, n.netns, "ip", "-d", "link", "show", mq.HostIf); !strings.Contains(d, "multi_queue") {
		t.Errorf("tap %s: want multi_queue:\n%s", mq.HostIf, d)
	}
	n.mustXlane(nil, "endpoint", "rm", "vm2")
	// Refused, naming the field: a netns, too many queues, an XDP mode.
	for _, bad := range [][]string{
		{"endpoint", "add", "vmn", "--vm", "--netns", c1},
		{"endpoint", "add", "vmn", "--vm", "--queues", "65"},
		{"network", "update", "vmn", "--mode", "xdp"},
	} {
		if _, stderr, err := n.xlane(bad...); err == nil || !strings.Contains(stderr, "netns") && !strings.Contains(stderr, "queues") && !strings.Contains(stderr, "VM endpoints need mode tc") {
			t.Errorf("xlane %s: err %v, stderr %q; want a refusal naming the reason", strings.Join(bad, " "), err, stderr)
		}
	}
	// The node's QEMU (Debian's, in PATH) has no af-xdp backend: status
	// says so, and an AF_XDP port is refused with that reason
	// (TestVMGuestAFXDP runs one on a QEMU that has it).
	var st api.Status
	n.mustXlane(&st, "status")
	if st.VM.AFXDPReason == "" || len(st.VM.Backends) != 1 || st.VM.Backends[0] != "tap" {
		t.Errorf("status vm %+v: want tap and why af-xdp is not offered", st.VM)
	}
	if _, stderr, err := n.xlane("endpoint", "add", "vmn", "--vm", "--backend", "af-xdp"); err == nil || !strings.Contains(stderr, st.VM.AFXDPReason) {
		t.Errorf("--backend af-xdp: err %v, stderr %q; want it refused with %q", err, stderr, st.VM.AFXDPReason)
	}
	// The tap and its programs outlive the daemon.
	n.stop(syscall.SIGKILL)
	n.start()
	var again api.EndpointInfo
	n.mustXlane(&again, "endpoint", "inspect", "vm1")
	if again.HostIf != ep.HostIf || len(again.Datapath) == 0 {
		t.Fatalf("after kill -9: endpoint %+v, want the same tap with its programs", again)
	}

	// A container on another network, and a service whose backend is the
	// container: the guest reaches both (routing between networks; the
	// service's DNAT and its reverse into the tap).
	n.mustXlane(nil, "network", "create", "vmo", "--subnet", "10.85.0.0/24", "--mode", "tc")
	c2 := newNetns(t, "c")
	var other api.EndpointInfo
	n.mustXlane(&other, "endpoint", "add", "vmo", "--netns", c2)
	vip := netip.MustParseAddrPort("10.96.84.10:80")
	n.mustXlane(nil, "service", "create", "vmsvc", "--vip", vip.String()+"/tcp", "--backend", netip.AddrPortFrom(ctr.IPs[0], 7000).String())
	lines := guestTraffic(t, n, guestRun{img: img, bin: guest, ep: ep, ctr: ctr, c1: c1, vip: vip,
		ping: []string{other.IPs[0].String(), "192.0.2.1"}, spoof: "10.84.0.250"})
	peer := ctr.IPs[0]
	if want := fmt.Sprintf("%s/24 router 10.84.0.1 server 10.84.0.1", ep.IPs[0]); !strings.HasPrefix(lines["dhcp"], want) {
		t.Errorf("guest's DHCP lease %q, want %s", lines["dhcp"], want)
	}
	if want := fmt.Sprintf("%s router fe80::1", ep.IPs[1]); !strings.HasPrefix(lines["dhcp6"], want) || lines["ping6"] != "ok" {
		t.Errorf("guest's IPv6: dhcp6 %q ping6 %q, want %s and ok", lines["dhcp6"], lines["ping6"], want)
	}

	var got api.EndpointInfo
	n.mustXlane(&got, "endpoint", "inspect", "vm1")
	if c := reason(got, "drop_spoofed", "from_endpoint"); c.Packets < 10 {
		t.Errorf("drop_spoofed = %d packets, want the guest's 10 spoofed datagrams", c.Packets)
	}
	// The guest's virtio-net hands the tap TSO segments (vnet headers):
	// count bytes, not packets.
	if c := reason(got, "fwd_peer", "from_endpoint"); c.Bytes < 1<<20 {
		t.Errorf("fwd_peer = %d bytes, want the guest's 1 MiB on the fast path", c.Bytes)
	}
	if got.Received.Bytes < 1<<20 {
		t.Errorf("tap transmitted %d bytes, want the container's 1 MiB", got.Received.Bytes)
	}
	if !strings.Contains(strings.Join(got.Notes, "\n"), "acked") {
		t.Errorf("inspect notes %q: want the DHCP server's", got.Notes)
	}
	// 192.0.2.1 is outside, with no route to the network: its replies
	// come back to the node's address and through the uplink program's
	// reverse NAT into the tap.
	for _, a := range []string{peer.String(), other.IPs[0].String(), "192.0.2.1"} {
		if lines["ping "+a] != "ok" {
			t.Errorf("guest's ping %s: %q", a, lines["ping "+a])
		}
	}
	n.mustXlane(nil, "service", "rm", "vmsvc")
	n.mustXlane(nil, "endpoint", "rm", other.ID)
	n.mustXlane(nil, "network", "rm", "vmo")
	n.mustXlane(nil, "endpoint", "rm", "vm1")
	n.mustXlane(nil, "endpoint", "rm", ctr.ID)
	n.mustXlane(nil, "network", "rm", "vmn")
	assertCleanNamed(t, n, "10.84.", "10.85.")
	t.Logf("VM endpoint test: %v in all", time.Since(start).Round(time.Millisecond))
}

// guestImage fetches the guest's kernel (the matrix's newest) and builds
// vmguest, static, for it.
func guestImage(t *testing.T) (img *vm.Image, guest string) {
	t.Helper()
	img, err := vm.Fetch(vm.Kernels[len(vm.Kernels)-1], vm.DefaultCacheDir())
	if err != nil {
		t.Fatalf("guest kernel: %v", err)
	}
	guest = filepath.Join(t.TempDir(), "vmguest")
	build := exec.Command("go", "build", "-o", guest, "github.com/xlane-dev/xlane/test/e2e/vmguest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vmguest: %v\n%s", err, out)
	}
	return img, guest
}

// runGuest boots img with one CPU and 512 MiB on ep (in n's netns; qemu
// "": the QEMU in PATH) and runs guest with args in it, at most 90 s. It
// logs the guest's output, fails the test unless the guest ran and exited
// 0, and returns the output's "key: value" lines.
func runGuest(t *testing.T, n *node, img *vm.Image, guest, qemu string, ep api.EndpointInfo, args []string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	boot := time.Now()
	rc, err := vm.Run(ctx, img, vm.Cmd{
		Path:   guest,
		Args:   args,
		Env:    []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Stdout: &out, Console: &out, CPUs: 1, MemMB: 512,
		Netns: nsPath(n.netns), QEMUArgs: ep.QEMUArgs, QEMU: qemu,
	})
	t.Logf("guest (%v):\n%s", time.Since(boot).Round(time.Millisecond), out.String())
	if err != nil || rc != 0 {
		t.Fatalf("guest: rc %d, %v", rc, err)
	}
	lines := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
			lines[k] = v
		}
	}
	return lines
}

// guestRun is one guest on a VM endpoint for guestTraffic.
type guestRun struct {
	img     *vm.Image
	bin     string           // vmguest, static
	qemu    string           // "": the QEMU in PATH
	ep, ctr api.EndpointInfo // the guest's endpoint; a container of its network
	c1      string           // the container's netns
	vip     netip.AddrPort   // a service VIP whose backend is ctr:7000
	ping    []string         // more addresses the guest pings
	spoof   string           // an address of the network the guest does not own
}

// guestTraffic boots the guest on its endpoint and runs vmguest: DHCP,
// pings (the container, g.ping), 1 MiB each way over TCP with the
// container through the service VIP (SHA-256 checked here, at the
// container's end), 10 UDP datagrams from g.spoof, which must not reach the
// container. It fails the test unless the guest ran and the transfer
// agrees, and returns the guest's "key: value" lines.
func guestTraffic(t *testing.T, n *node, g guestRun) map[string]string {
	t.Helper()
	peer := g.ctr.IPs[0]
	ln := listenIn(t, g.c1, netip.AddrPortFrom(peer, 7000))
	type tcpResult struct {
		got, sent string
		err       error
	}
	res := make(chan tcpResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- tcpResult{err: err}
			return
		}
		defer c.Close()
		got := sha256.New()
		if _, err := io.Copy(got, c); err != nil {
			res <- tcpResult{err: err}
			return
		}
		sent := sha256.New()
		_, err = io.Copy(c, io.TeeReader(io.LimitReader(rand.Reader, 1<<20), sent))
		res <- tcpResult{fmt.Sprintf("%x", got.Sum(nil)), fmt.Sprintf("%x", sent.Sum(nil)), err}
	}()
	spoofSrv, spoofC := udpPair(t, g.c1, g.c1, netip.AddrPortFrom(peer, 7001))
	spoofC.Close()
	defer spoofSrv.Close()
	spoofed := make(chan int, 1)
	go func() {
		buf := make([]byte, 64)
		k := 0
		for {
			spoofSrv.SetReadDeadline(time.Now().Add(90 * time.Second))
			if _, err := spoofSrv.Read(buf); err != nil {
				spoofed <- k
				return
			}
			k++
		}
	}()

	args := []string{"-peer", peer.String(), "-tcp", g.vip.String(), "-udp", "7001", "-spoof", g.spoof, "-size", fmt.Sprint(1 << 20)}
	if len(g.ping) > 0 {
		args = append(args, "-ping", strings.Join(g.ping, ","))
	}
	if len(g.ctr.IPs) > 1 {
		args = append(args, "-peer6", g.ctr.IPs[1].String())
	}
	lines := runGuest(t, n, g.img, g.bin, g.qemu, g.ep, args)
	r := <-res
	if r.err != nil {
		t.Fatalf("container side of the transfer: %v", r.err)
	}
	if want := fmt.Sprintf("sent %s received %s", r.got, r.sent); lines["tcp"] != want {
		t.Errorf("transfer: guest says %q, container says %q", lines["tcp"], want)
	}
	spoofSrv.SetReadDeadline(time.Now())
	if k := <-spoofed; k != 0 {
		t.Errorf("container received %d spoofed datagrams from the guest", k)
	}
	return lines
}
