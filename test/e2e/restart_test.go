package e2e

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/features"
)

// xlaned starts again after kill -9, and --uninstall runs, whatever state
// the runtimes left their endpoints in: every endpoint kind of a network
// with BIG TCP on and off (and netkit, where the kernel has it: the
// kernel matrix's 6.12 leg runs it), among them a veth-only endpoint whose
// peer the runtime moved into a namespace xlane does not know (Docker's
// case: re-applying BIG TCP there used to fail the start with "container
// side moved by the runtime into an unknown namespace").
//
//	node netns (xlaned)                          container netns
//	  xlh.. (veth, --netns)  ------------------  eth0  c1
//	  xlh.. (veth-only)      ------------------  eth0  c2 (moved, configured by the test)
//	  xlh.. (veth, CNI ADD)  ------------------  eth0  c3
//	  xlv.. (VM tap, no guest)
func TestRestartWhateverEndpointState(t *testing.T) {
	for _, tc := range []struct{ name, device, bigTCP string }{
		{"veth/big-tcp-on", "veth", "on"},
		{"veth/big-tcp-off", "veth", "off"},
		{"netkit/big-tcp-off", "netkit", "off"}, // BIG TCP is set on veths only
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.device == "netkit" {
				features.Require(t, features.Netkit)
			}
			testRestartEndpoints(t, tc.device, tc.bigTCP)
		})
	}
}

func testRestartEndpoints(t *testing.T, device, bigTCP string) {
	n := newNode(t)
	n.mustXlane(nil, "network", "create", "bt", "--subnet", "10.93.0.0/24", "--subnet", "fd00:93::/64", "--mode", "tc", "--device", device, "--big-tcp", bigTCP)
	c1, c2, c3 := newNetns(t, "c"), newNetns(t, "c"), newNetns(t, "c")
	var ep1, ep2, vm api.EndpointInfo
	n.mustXlane(&ep1, "endpoint", "add", "bt", "--netns", c1, "--id", "ctr")
	// A VM's tap needs /dev/net/tun: the host has it (make test runs the
	// VM kind there); the kernel matrix's guests do not.
	_, tunErr := os.Stat("/dev/net/tun")
	if tunErr == nil {
		n.mustXlane(&vm, "endpoint", "add", "bt", "--vm", "--id", "vm1")
	} else {
		omitInGuest(t, "VM tap", tunErr)
	}
	// cnitool caches its results under /var/lib/cni: the kernel matrix's
	// guests run on a read-only root, so the CNI kind runs on the host.
	cniErr := writableDir("/var/lib/cni/results")
	if cniErr == nil {
		h := newCNIHost(t, n)
		cniName := "xlrestart-" + suffix()
		h.conf(cniName, "1.0.0", h.xlanePlugin("bt", map[string]any{"subnets": []string{"10.93.0.0/24", "fd00:93::/64"}}))
		h.mustCNITool(nil, "add", cniName, nsPath(c3))
	} else {
		omitInGuest(t, "CNI", cniErr)
	}
	var ep3 *api.EndpointInfo
	if device != "veth" {
		// A second endpoint of the device's own kind to send from.
		n.mustXlane(&ep2, "endpoint", "add", "bt", "--netns", c2, "--id", "ctr2")
	} else {
		n.mustXlane(&ep2, "endpoint", "add", "bt", "--veth-only", "--id", "runtime-ctr")
		// Play the runtime: move the peer where xlane does not look, and
		// configure it.
		runIn(t, n.netns, "ip", "link", "set", ep2.PeerIf, "netns", nsPath(c2), "name", "eth0")
		runIn(t, c2, "ip", "addr", "add", ep2.IPs[0].String()+"/24", "dev", "eth0")
		runIn(t, c2, "ip", "link", "set", "eth0", "up")
		runIn(t, c2, "ip", "route", "add", "default", "via", "10.93.0.1")
	}
	var eps []api.EndpointInfo
	n.mustXlane(&eps, "endpoint", "ls")
	for i := range eps {
		if eps[i].Attachment != nil {
			ep3 = &eps[i]
		}
	}
	if ep3 == nil && cniErr == nil {
		t.Fatalf("no CNI attachment among %d endpoints", len(eps))
	}

	n.stop(syscall.SIGKILL)
	n.start()

	n.mustXlane(&eps, "endpoint", "ls")
	if len(eps) != 2+btoi(tunErr == nil)+btoi(cniErr == nil) {
		t.Fatalf("after restart: %d endpoints, want all of them", len(eps))
	}
	for _, e := range eps {
		want := "ready"
		if e.VM {
			want = "waiting for QEMU (tap not opened)"
		}
		if e.State != want || e.Error != "" {
			t.Errorf("after restart: endpoint %s state %q error %q, want %q", e.ID, e.State, e.Error, want)
		}
	}
	gw := netip.MustParseAddr("10.93.0.1")
	ping(t, c1, gw)
	if cniErr == nil {
		ping(t, c3, ep1.IPs[0])
		transfer(t, c3, c1, ep1.IPs[0], bulk/8)
	}
	ping(t, c2, ep1.IPs[0])
	ping(t, c1, ep2.IPs[0])
	transfer(t, c2, c1, ep1.IPs[0], bulk/8)
	if device == "veth" {
		// The host side of the veth-only endpoint still has the
		// network's BIG TCP sizes (IPv6's: Debian 12's ip shows no
		// gso_ipv4_max_size).
		link := runIn(t, n.netns, "ip", "-d", "link", "show", ep2.HostIf)
		if on := strings.Contains(link, "gso_max_size 196608"); on != (bigTCP == "on") {
			t.Errorf("BIG TCP %s, host veth of the veth-only endpoint:\n%s", bigTCP, link)
		}
	}
	var st api.Status
	n.mustXlane(&st, "status")
	if st.Health == nil || !st.Health.OK {
		t.Errorf("health after restart: %+v", st.Health)
	}

	// kill -9 again and uninstall: it runs, and leaves nothing.
	n.stop(syscall.SIGKILL)
	n.uninstall()
	assertCleanNamed(t, n, "10.93.", "fd00:93")
}

// omitInGuest leaves an endpoint kind out of a run in the kernel matrix's
// guests, which lack what it needs (err), saying so; anywhere else (make
// test, CI's host) the missing piece fails the test.
func omitInGuest(t *testing.T, kind string, err error) {
	t.Helper()
	if k := os.Getenv("XLANE_VM_KERNEL"); k != "" {
		t.Logf("no %s endpoint in the %s guest: %v", kind, k, err)
		return
	}
	t.Fatalf("%s endpoint: %v", kind, err)
}

// writableDir makes dir if it is missing and says whether a file can be
// created in it.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".xlane-probe-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// xlaned started with `ip netns exec` (which gives it a mount namespace
// whose /sys has no cgroup2 and no bpffs) refuses to start and says what
// to use instead, rather than pinning into a private bpffs and running
// with the node's own processes cut off from services while its health
// says ok.
func TestRefusesIPNetnsExec(t *testing.T) {
	skipInMatrixGuest(t, "not run there: the guests mount no cgroup2, so the refusal differs (it names only bpf)")
	netns := newNetns(t, "node")
	dir := t.TempDir()
	pinDir := "/sys/fs/bpf/xle-" + suffix()
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", netns, filepath.Join(binDir, "xlaned"),
		"--state", filepath.Join(dir, "state.db"), "--socket", filepath.Join(dir, "xlane.sock"), "--pin-dir", pinDir,
		"--docker-plugin-socket=", "--calibrate-at-start=false")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("xlaned under ip netns exec ran on (killed after %s):\n%s", startTimeout(), out)
	}
	if err == nil || !strings.Contains(string(out), "nsenter --net=") || !strings.Contains(string(out), "cgroup2") {
		t.Fatalf("xlaned under ip netns exec: %v\n%s\nwant a refusal that names the hidden mounts and nsenter --net=", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
		t.Errorf("the refused start created its state file")
	}
}

// xlane's own cgroup (proxy redirects and acceleration without --cgroup)
// is not created by a request that is refused, and --uninstall removes it.
func TestOwnCgroupLeftovers(t *testing.T) {
	root, err := accel.Cgroup2Root()
	if err != nil {
		skipInMatrixGuest(t, "the guests mount no cgroup2")
		t.Fatal(err)
	}
	own := filepath.Join(root, accel.DefaultCgroup)
	if _, err := os.Stat(own); err == nil {
		// make test runs nothing else that may keep it: a leftover of an
		// earlier test (or of a node's xlaned) is what this test is about.
		t.Fatalf("%s exists before the test: a leftover (or another xlaned on this machine uses it)", own)
	}
	n := newNode(t)
	if _, stderr, err := n.xlane("proxy", "redirect", "--port", "8080", "--to", "15001", "--exempt", "mark"); err == nil || !strings.Contains(stderr, "mark") {
		t.Fatalf("redirect without its mark: %v %s, want it refused", err, stderr)
	}
	if _, err := os.Stat(own); err == nil {
		os.Remove(own)
		t.Fatalf("a refused request created %s", own)
	}
	for i := range 2 {
		n.mustXlane(nil, "proxy", "redirect", "--port", "8080", "--to", "15001", "--exempt", "uid", "--uid", "1337")
		if _, err := os.Stat(own); err != nil {
			t.Fatalf("redirect on xlane's cgroup: %v", err)
		}
		if i == 1 {
			break // the second one stays for --uninstall
		}
		// The last redirect on it gone, it goes.
		n.mustXlane(nil, "proxy", "rm", "8080")
		if _, err := os.Stat(own); err == nil {
			t.Fatalf("%s left after the last redirect on it went", own)
		}
	}
	n.stop(syscall.SIGTERM)
	o := n.uninstall()
	if _, err := os.Stat(own); err == nil {
		os.Remove(own)
		t.Errorf("--uninstall left %s:\n%s", own, o)
	}
}

// uninstall runs xlaned --uninstall on the node (its daemon stopped) and
// returns what it printed.
func (n *node) uninstall() string {
	n.t.Helper()
	args := append([]string{filepath.Join(binDir, "xlaned"), "--uninstall",
		"--state", filepath.Join(n.dir, "state.db"), "--socket", n.socket, "--pin-dir", n.pinDir}, n.flags...)
	o, err := inNS(n.netns, args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("xlaned --uninstall: %v\n%s", err, o)
	}
	return string(o)
}
