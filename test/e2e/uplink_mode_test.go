package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// TestUplinkXDPMode: --uplink-xdp-mode native and generic attach the uplink
// program in that mode (xlane status says which, ip link agrees), a restart
// in the other mode moves it, auto on this veth uplink attaches generic
// for an xdp-mode network (replacing a native link; the peer keeps TSO)
// and nothing for a tc-mode one until the firewall's uplink stage has
// work (a blocked prefix), then generic, kept across a restart; the
// outside reaches an xdp-mode endpoint through each; none removes
// xlane's XDP link; offload is refused at start, naming the device, the mode and
// the driver, with nothing attached or written.
func TestUplinkXDPMode(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"), func(n *node) { n.flags = append(n.flags, "--uplink-xdp-mode", "native") })
	n.mustXlane(nil, "network", "create", "up", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", "xdp", "--masquerade=false", "--allow-unsolicited")
	c := newNetns(t, "c")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "up", "--netns", c)
	check := func(want, ipWord string) {
		t.Helper()
		var st api.Status
		n.mustXlane(&st, "status")
		if st.UplinkXDPMode != want {
			t.Errorf("status uplink_xdp_mode = %q, want %q", st.UplinkXDPMode, want)
		}
		if o := runIn(t, n.netns, "ip", "-d", "link", "show", "up0"); !strings.Contains(o, ipWord) {
			t.Errorf("ip link show up0: want %q:\n%s", ipWord, o)
		}
		if o, _, _ := n.xlane("status"); !strings.Contains(o, "XDP: "+want) {
			t.Errorf("xlane status: want \"XDP: %s\":\n%s", want, o)
		}
		ping(t, out, ep.IPs[0])
		ping(t, out, ep.IPs[1])
	}
	check("native", "xdp ")
	n.stop(syscall.SIGTERM)
	n.flags[len(n.flags)-1] = "generic"
	n.start()
	check("generic", "xdpgeneric")
	n.stop(syscall.SIGTERM)
	// auto on a veth: generic (native would take TSO from the peer, which
	// ethtool shows), and a restart in auto replaces a native link.
	n.flags[len(n.flags)-1] = "native"
	n.start()
	check("native", "xdp ")
	n.stop(syscall.SIGTERM)
	// none: no XDP link (the native one goes), the uplink keeps its tc
	// program, and the outside still reaches the xdp-mode endpoint
	// (through Linux).
	checkNone := func(n *node, what string, eps ...netip.Addr) {
		t.Helper()
		var st api.Status
		n.mustXlane(&st, "status")
		if st.UplinkXDPMode != "" {
			t.Errorf("%s: status uplink_xdp_mode = %q, want none attached", what, st.UplinkXDPMode)
		}
		if o := runIn(t, n.netns, "ip", "-d", "link", "show", "up0"); strings.Contains(o, "xdp") {
			t.Errorf("%s: ip link show up0 still has an XDP program:\n%s", what, o)
		}
		if o, _, _ := n.xlane("status"); !strings.Contains(o, "XDP: none") {
			t.Errorf("%s: xlane status: want \"XDP: none\":\n%s", what, o)
		}
		for _, a := range eps {
			ping(t, out, a)
		}
	}
	// auto on a veth with an xdp-mode network: generic (its endpoints
	// take the uplink program's redirects; native would take TSO from
	// the peer, which ethtool shows).
	n.flags[len(n.flags)-1] = "auto"
	n.start()
	check("generic", "xdpgeneric")
	if o := runIn(t, out, "ethtool", "-k", "out0"); !strings.Contains(o, "tcp-segmentation-offload: on") {
		t.Errorf("ethtool -k out0 (the uplink's peer) with auto's generic program: want TSO on:\n%s", o)
	}
	n.stop(syscall.SIGTERM)
	n.flags[len(n.flags)-1] = "none"
	n.start()
	checkNone(n, "none", ep.IPs...)
	n.stop(syscall.SIGTERM)

	// auto on a veth with a tc-mode network only: no XDP program
	// (generic would copy every GSO packet received) until the
	// firewall's uplink stage has work (a blocked prefix), then generic,
	// kept across a restart.
	var out3 string
	n3 := newNode(t, withOutside(&out3, "1500"))
	n3.mustXlane(nil, "network", "create", "t", "--subnet", "10.86.0.0/24", "--mode", "tc", "--masquerade=false", "--allow-unsolicited")
	out = out3
	checkNone(n3, "auto, tc network")
	n3.mustXlane(nil, "fw", "block", "add", "203.0.113.0/24")
	for _, restart := range []bool{false, true} {
		if restart {
			n3.stop(syscall.SIGTERM)
			n3.start()
		}
		var st api.Status
		n3.mustXlane(&st, "status")
		if o := runIn(t, n3.netns, "ip", "-d", "link", "show", "up0"); st.UplinkXDPMode != "generic" || !strings.Contains(o, "xdpgeneric") {
			t.Errorf("auto, a blocked prefix (restart %v): status uplink_xdp_mode = %q, want generic; ip link:\n%s", restart, st.UplinkXDPMode, o)
		}
	}
	n3.stop(syscall.SIGTERM)

	// Offload: refused before anything changes.
	var out2 string
	n2 := &node{t: t, netns: newNetns(t, "node"), dir: t.TempDir()}
	withOutside(&out2, "1500")(n2)
	state := filepath.Join(n2.dir, "state.db")
	pin := "/sys/fs/bpf/xle-" + suffix()
	defer os.RemoveAll(pin)
	cmd := inNS(n2.netns, filepath.Join(binDir, "xlaned"), "--state", state, "--socket", filepath.Join(n2.dir, "s.sock"),
		"--pin-dir", pin, "--docker-plugin-socket=", "--uplink", "up0", "--uplink-xdp-mode", "offload")
	o, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("xlaned --uplink-xdp-mode offload on a veth started:\n%s", o)
	}
	for _, w := range []string{"up0", "offload", "not supported by driver veth"} {
		if !strings.Contains(string(o), w) {
			t.Errorf("xlaned --uplink-xdp-mode offload: error does not say %q:\n%s", w, o)
		}
	}
	if l := runIn(t, n2.netns, "ip", "link", "show", "up0"); strings.Contains(l, "xdp") {
		t.Errorf("up0 has an XDP program after the refused start:\n%s", l)
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("the refused start created its state file")
	}
	if _, err := os.Stat(pin); err == nil {
		t.Errorf("the refused start created its pin directory")
	}
}
