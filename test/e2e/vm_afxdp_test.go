package e2e

import (
	"fmt"
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
	if os.Getenv("XLANE_E2E_BIN") != "" {
		t.Skip("the kernel matrix's guests run no nested QEMU guest")
	}
	qemu := afxdpQEMU(t)
	start := time.Now()
	img, err := vm.Fetch(vm.Kernels[len(vm.Kernels)-1], vm.DefaultCacheDir())
	if err != nil {
		t.Fatalf("guest kernel: %v", err)
	}
	guest := filepath.Join(t.TempDir(), "vmguest")
	build := exec.Command("go", "build", "-o", guest, "github.com/xlane-dev/xlane/test/e2e/vmguest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build vmguest: %v\n%s", err, out)
	}

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
