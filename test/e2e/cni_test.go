package e2e

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// refPlugins is where Debian's containernetworking-plugins puts the
// reference plugins (scripts/deps.sh installs it).
const refPlugins = "/usr/lib/cni"

// cniHost runs CNI clients against a node's xlaned through xlane-cni:
//
//	node netns: xlaned, and cnitool or a runtime with the plugins it runs
//	            (xlane-cni calls xlaned's socket; portmap's iptables rules
//	            land here, where the published port is)
//	containers: namespaces of their own, attached by the plugins
//
// Its configuration and plugin directories are the test's own, and every
// result libcni caches for its uniquely named CNI networks is removed when
// the test ends.
type cniHost struct {
	t       *testing.T
	n       *node
	confDir string
	binDir  string
	// names of the CNI networks the test configured (cache cleanup)
	names []string
}

func newCNIHost(t *testing.T, n *node) *cniHost {
	t.Helper()
	dir := t.TempDir()
	h := &cniHost{t: t, n: n, confDir: filepath.Join(dir, "net.d"), binDir: filepath.Join(dir, "bin")}
	for _, d := range []string{h.confDir, h.binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{"xlane-cni": filepath.Join(binDir, "xlane-cni")}
	for _, p := range []string{"portmap", "loopback"} {
		links[p] = filepath.Join(refPlugins, p)
	}
	for name, target := range links {
		if _, err := os.Stat(target); err != nil {
			t.Fatalf("%s: %v (Debian's containernetworking-plugins: scripts/deps.sh installs it)", target, err)
		}
		if err := os.Symlink(target, filepath.Join(h.binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range h.names {
			files, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", name+"-*"))
			for _, f := range files {
				os.Remove(f)
			}
		}
	})
	return h
}

// xlanePlugin is xlane-cni's configuration for this node; extra keys are
// added or override.
func (h *cniHost) xlanePlugin(network string, extra map[string]any) map[string]any {
	p := map[string]any{"type": "xlane-cni", "socket": h.n.socket, "network": network,
		"subnets": []string{"10.211.0.0/24", "fd00:211::/64"}}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// conf writes a configuration for CNI network name: a single plugin's
// .conf before spec 0.3.0 (which has no lists), else a .conflist.
func (h *cniHost) conf(name, ver string, plugins ...map[string]any) {
	h.t.Helper()
	h.names = append(h.names, name)
	var v any
	file := filepath.Join(h.confDir, name+".conflist")
	if older, _ := version.GreaterThan("0.3.0", ver); older {
		if len(plugins) != 1 {
			h.t.Fatalf("spec %s: one plugin per configuration", ver)
		}
		p := map[string]any{"cniVersion": ver, "name": name}
		for k, val := range plugins[0] {
			p[k] = val
		}
		v, file = p, filepath.Join(h.confDir, name+".conf")
	} else {
		v = map[string]any{"cniVersion": ver, "name": name, "plugins": plugins}
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// cnitool runs cnitool in the node's namespace; env adds variables
// (CAP_ARGS, CNI_ARGS, CNI_IFNAME).
func (h *cniHost) cnitool(env []string, args ...string) (stdout, stderr string, err error) {
	cmd := inNS(h.n.netns, append([]string{filepath.Join(binDir, "cnitool")}, args...)...)
	cmd.Env = append(append(os.Environ(), "NETCONFPATH="+h.confDir, "CNI_PATH="+h.binDir), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func (h *cniHost) mustCNITool(env []string, args ...string) string {
	h.t.Helper()
	out, stderr, err := h.cnitool(env, args...)
	if err != nil {
		h.t.Fatalf("cnitool %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// parseResult decodes a plugin's result of spec ver into the current
// version.
func parseResult(t *testing.T, ver, out string) *current.Result {
	t.Helper()
	r, err := version.NewResult(ver, []byte(out))
	if err != nil {
		t.Fatalf("decode %s result: %v\n%s", ver, err, out)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatalf("convert %s result: %v", ver, err)
	}
	return res
}

// resultAddrs returns the result's addresses of the interface ifname in a
// sandbox (all addresses for results before 0.3.0, which have no
// interfaces).
func resultAddrs(t *testing.T, res *current.Result, ifname string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, ip := range res.IPs {
		if ip.Interface != nil {
			i := res.Interfaces[*ip.Interface]
			if i.Name != ifname || i.Sandbox == "" {
				continue
			}
		}
		p, ok := netip.AddrFromSlice(ip.Address.IP)
		if !ok {
			t.Fatalf("result address %v", ip.Address)
		}
		ones, _ := ip.Address.Mask.Size()
		out = append(out, netip.PrefixFrom(p.Unmap(), ones))
	}
	return out
}

// TestCNITool drives xlane-cni with cnitool (github.com/containernetworking/
// cni/cnitool, built from this module's version of it) through every spec
// version: ADD gives an interface with IPv4 and IPv6 in the network,
// traffic flows, CHECK passes (0.4.0 on; before, libcni refuses it),
// STATUS answers, DEL removes everything and is idempotent, also once the
// netns is gone, and so does GC (TestCNIGC checks what it releases).
func TestCNITool(t *testing.T) {
	n := newNode(t)
	h := newCNIHost(t, n)
	net := "cni" + suffix()
	var first *current.Result
	firstNS := ""
	for _, ver := range version.All.SupportedVersions() {
		c := newNetns(t, "c") // the test's: the first outlives its subtest
		t.Run(ver, func(t *testing.T) {
			name := "xl" + strings.ReplaceAll(ver, ".", "") + "-" + suffix()
			h.conf(name, ver, h.xlanePlugin(net, nil))
			out := h.mustCNITool(nil, "add", name, nsPath(c))
			res := parseResult(t, ver, out)
			addrs := resultAddrs(t, res, "eth0")
			want := []netip.Prefix{netip.MustParsePrefix("10.211.0.0/24"), netip.MustParsePrefix("fd00:211::/64")}
			if len(addrs) != 2 || !want[0].Contains(addrs[0].Addr()) || addrs[0].Bits() != 24 ||
				!want[1].Contains(addrs[1].Addr()) || addrs[1].Bits() != 64 {
				t.Fatalf("result addresses %v, want one in each of %v\n%s", addrs, want, out)
			}
			if older, _ := version.GreaterThan("0.3.0", ver); !older {
				i := slices.IndexFunc(res.Interfaces, func(i *current.Interface) bool { return i.Name == "eth0" })
				if i < 0 || res.Interfaces[i].Sandbox != nsPath(c) || res.Interfaces[i].Mac == "" {
					t.Errorf("result interfaces %+v: want eth0 with its MAC in sandbox %s", res.Interfaces, nsPath(c))
				}
				if !slices.ContainsFunc(res.Routes, func(r *types.Route) bool { return r.Dst.String() == "0.0.0.0/0" }) ||
					!slices.ContainsFunc(res.Routes, func(r *types.Route) bool { return r.Dst.String() == "::/0" }) {
					t.Errorf("result routes %v: want IPv4 and IPv6 default routes", res.Routes)
				}
			}
			// The node's view: one attachment endpoint, keyed by
			// cnitool's container ID and eth0.
			id := model.AttachmentID(cnitoolContainerID(nsPath(c)), "eth0")
			ep, err := n.client().Endpoint(context.Background(), id)
			if err != nil {
				t.Fatalf("endpoint %s: %v", id, err)
			}
			if ep.Attachment == nil || ep.Attachment.CNINetwork != name || ep.State != "ready" {
				t.Errorf("endpoint %+v: want a ready attachment of CNI network %s", ep, name)
			}
			ping(t, c, netip.MustParseAddr("10.211.0.1"))
			if first == nil {
				first, firstNS = res, c
			} else {
				// Container to container, IPv4 and IPv6, checked.
				transfer(t, c, firstNS, resultAddrs(t, first, "eth0")[0].Addr(), 1<<20)
				transfer(t, firstNS, c, addrs[1].Addr(), 1<<20)
			}
			_, stderr, err := h.cnitool(nil, "check", name, nsPath(c))
			if older, _ := version.GreaterThan("0.4.0", ver); older {
				if err == nil || !strings.Contains(stderr, "CHECK") {
					t.Errorf("check at %s: err %v %q, want libcni's refusal (CHECK is 0.4.0 on)", ver, err, stderr)
				}
			} else if err != nil {
				t.Errorf("check: %v\n%s", err, stderr)
			}
			h.mustCNITool(nil, "status", name, nsPath(c))
			if ver == "1.1.0" {
				// CHECK notices what went missing in the container.
				runIn(t, c, "ip", "addr", "del", addrs[0].String(), "dev", "eth0")
				if _, stderr, err := h.cnitool(nil, "check", name, nsPath(c)); err == nil || !strings.Contains(stderr, addrs[0].Addr().String()) {
					t.Errorf("check after the address was removed: err %v %q, want a failure naming it", err, stderr)
				}
			}
			if ver == version.All.SupportedVersions()[0] {
				return // the first stays: the others send traffic to it
			}
			h.mustCNITool(nil, "del", name, nsPath(c))
			if _, err := n.client().Endpoint(context.Background(), id); err == nil {
				t.Errorf("endpoint %s still there after DEL", id)
			}
			h.mustCNITool(nil, "del", name, nsPath(c)) // again: nothing to do
			// GC: libcni DELs its cached attachments of the network (every
			// version), then, from 1.1.0, xlane-cni's GC runs.
			h.mustCNITool(nil, "add", name, nsPath(c))
			if _, err := n.client().Endpoint(context.Background(), id); err != nil {
				t.Fatalf("endpoint %s after the second ADD: %v", id, err)
			}
			h.mustCNITool(nil, "gc", name, nsPath(c))
			if _, err := n.client().Endpoint(context.Background(), id); err == nil {
				t.Errorf("endpoint %s still there after GC", id)
			}
			h.mustCNITool(nil, "gc", name, nsPath(c))
		})
	}
	t.Run("del without netns", func(t *testing.T) {
		name := h.names[0]
		path := nsPath(firstNS)
		run(t, "ip", "netns", "del", firstNS)
		h.mustCNITool(nil, "del", name, path)
		eps, err := n.client().Endpoints(context.Background(), "")
		if err != nil || len(eps) != 0 {
			t.Errorf("endpoints after DEL of a gone netns: %+v %v, want none", eps, err)
		}
	})
}

// cnitoolContainerID is the container ID cnitool derives from a netns
// path: "cnitool-" and the first 10 bytes of its SHA-512, in hex.
func cnitoolContainerID(path string) string {
	s := sha512.Sum512([]byte(path))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// TestCNIChain runs xlane-cni chained, through cnitool: after the
// reference loopback plugin (so it merges a previous result) and before the
// reference portmap plugin, whose published port is reached from outside
// the node with real traffic:
//
//	outside [out0 192.0.2.1] ==== [up0 192.0.2.2] node: portmap's DNAT
//	                                 :18080 -> container:8080
//
// In kernel mode only: portmap's iptables DNAT needs the replies to go
// back through Linux's conntrack, which the BPF modes bypass (they
// forward, and masquerade, the container's packets themselves); there
// xlane's own published ports do the job (docs/kubernetes.md).
func TestCNIChain(t *testing.T) {
	for _, mode := range []string{"kernel"} {
		t.Run(mode, func(t *testing.T) {
			var out string
			n := newNode(t, withOutsideRoutes(&out, "1500", false))
			h := newCNIHost(t, n)
			name, xnet := "chain-"+suffix(), "chain"+suffix()
			h.conf(name, "1.0.0",
				map[string]any{"type": "loopback"},
				h.xlanePlugin(xnet, map[string]any{"mode": mode, "allowUnsolicited": true}),
				map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}, "snat": true})
			c := newNetns(t, "c")
			capArgs := []string{`CAP_ARGS={"portMappings":[{"hostPort":18080,"containerPort":8080,"protocol":"tcp"}]}`}
			res := parseResult(t, "1.0.0", h.mustCNITool(capArgs, "add", name, nsPath(c)))
			if len(res.Interfaces) < 3 || res.Interfaces[0].Name != "lo" {
				t.Fatalf("result interfaces %+v: want loopback's lo first, then xlane's", res.Interfaces)
			}
			addrs := resultAddrs(t, res, "eth0")
			if len(addrs) != 2 {
				t.Fatalf("eth0 addresses %v, want IPv4 and IPv6", addrs)
			}
			if lo := resultAddrs(t, res, "lo"); len(lo) == 0 {
				t.Errorf("loopback's addresses were lost from the chained result: %+v", res.IPs)
			}
			// No CHECK through portmap here: Debian's portmap (1.1.1) fails
			// its own CHECK on a dual-stack result (containernetworking/
			// plugins#819). The loopback chain below is checked.
			node4 := netip.MustParseAddr("192.0.2.2")
			transferVia(t, out, c, netip.AddrPortFrom(addrs[0].Addr(), 8080), netip.AddrPortFrom(node4, 18080), 4<<20)
			h.mustCNITool(capArgs, "del", name, nsPath(c))
			if err := dialOnce(out, netip.AddrPortFrom(node4, 18080)); err == nil {
				t.Errorf("port 18080 still answers after DEL")
			}
			// CHECK of a chained result: loopback's entries first.
			lo := "lo-" + suffix()
			h.conf(lo, "1.0.0", map[string]any{"type": "loopback"}, h.xlanePlugin(xnet, map[string]any{"mode": mode}))
			c2 := newNetns(t, "c")
			h.mustCNITool(nil, "add", lo, nsPath(c2))
			h.mustCNITool(nil, "check", lo, nsPath(c2))
			h.mustCNITool(nil, "del", lo, nsPath(c2))
		})
	}
}

// TestCNIGC checks GC through libcni (with cni.dev/valid-attachments) and
// through cnitool (without: none valid). The libcni result cache is emptied
// first, so what goes is what xlane-cni's GC removed, not libcni's DEL of
// cached attachments. An attachment of another CNI network, an endpoint
// made with the CLI and the valid attachment stay; of the others nothing
// stays: endpoint, devices, pinned links, conntrack and NAT entries,
// address lease (the address is handed out again). A stale xlane device
// (left by a crash) goes too.
func TestCNIGC(t *testing.T) {
	var out string
	n := newNode(t, withOutsideRoutes(&out, "1500", false))
	h := newCNIHost(t, n)
	xnet := "gc" + suffix()
	nameA, nameB := "gca-"+suffix(), "gcb-"+suffix()
	h.conf(nameA, "1.1.0", h.xlanePlugin(xnet, nil))
	h.conf(nameB, "1.1.0", h.xlanePlugin(xnet, nil))
	c1, c2, c3, c4 := newNetns(t, "c"), newNetns(t, "c"), newNetns(t, "c"), newNetns(t, "c")
	add := func(name, c string, env ...string) *current.Result {
		return parseResult(t, "1.1.0", h.mustCNITool(env, "add", name, nsPath(c)))
	}
	r1, r2 := add(nameA, c1), add(nameA, c2)
	add(nameB, c3)
	var e4 api.EndpointInfo
	n.mustXlane(&e4, "endpoint", "add", xnet, "--netns", c4)
	a1, a2 := resultAddrs(t, r1, "eth0"), resultAddrs(t, r2, "eth0")
	// Flows of c2: to c1 (tracked), and out of the node (masqueraded:
	// the reply's entry is keyed by the node's address).
	transfer(t, c2, c1, a1[0].Addr(), 1<<20)
	transfer(t, c2, out, netip.MustParseAddr("192.0.2.1"), 1<<20)
	id1 := cnitoolContainerID(nsPath(c1))
	id2 := model.AttachmentID(cnitoolContainerID(nsPath(c2)), "eth0")
	ep2, err := n.client().Endpoint(context.Background(), id2)
	if err != nil {
		t.Fatal(err)
	}
	flowsOf := func(a netip.Addr) []api.Flow {
		flows, err := n.client().Flows(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []api.Flow
		for _, f := range flows {
			for _, s := range []string{f.Src, f.Dst, f.NATTo} {
				if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr() == a {
					out = append(out, f)
					break
				}
			}
		}
		return out
	}
	if f := flowsOf(a2[0].Addr()); len(f) < 4 || !slices.ContainsFunc(f, func(f api.Flow) bool { return f.NAT == "snat" }) {
		t.Fatalf("flows of %s before GC: %+v, want tracked and masqueraded ones", a2[0], f)
	}
	runIn(t, n.netns, "ip", "link", "add", "xlhdeadbe01", "type", "veth", "peer", "name", "xlcdeadbe01")
	for _, name := range []string{nameA, nameB} {
		files, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", name+"-*"))
		for _, f := range files {
			os.Remove(f)
		}
	}

	list, err := libcni.LoadNetworkConf(h.confDir, nameA)
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{h.binDir}, t.TempDir(), nil)
	err = cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: id1, IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	eps := map[string]api.EndpointInfo{}
	all, err := n.client().Endpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		eps[e.ID] = e
	}
	if _, ok := eps[id2]; ok || len(eps) != 3 {
		t.Errorf("endpoints after GC: %v, want c1's, c3's (another CNI network) and the CLI's", slices.Collect(maps.Keys(eps)))
	}
	for _, dev := range []string{ep2.HostIf, "xlhdeadbe01"} {
		if _, err := inNS(n.netns, "ip", "link", "show", dev).CombinedOutput(); err == nil {
			t.Errorf("device %s still on the node after GC", dev)
		}
	}
	if pins, _ := filepath.Glob(filepath.Join(n.pinDir, "links", ep2.HostIf+"*")); len(pins) > 0 {
		t.Errorf("pinned links of the removed endpoint: %v", pins)
	}
	if f := flowsOf(a2[0].Addr()); len(f) > 0 {
		t.Errorf("flows of %s after GC: %+v", a2[0], f)
	}
	ping(t, c1, netip.MustParseAddr("10.211.0.1"))
	// c2's addresses are free again.
	c5 := newNetns(t, "c")
	r5 := add(nameA, c5, "CNI_ARGS=IP="+a2[0].Addr().String()+","+a2[1].Addr().String())
	if got := resultAddrs(t, r5, "eth0"); !slices.Equal(got, a2) {
		t.Errorf("addresses after GC released %v: got %v", a2, got)
	}

	// cnitool's gc: no valid list; c5's cached attachment is DELeted by
	// libcni, c1's (no cache entry) by xlane-cni's GC.
	h.mustCNITool(nil, "gc", nameA, nsPath(c1))
	all, err = n.client().Endpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range all {
		left = append(left, e.ID)
	}
	id3 := model.AttachmentID(cnitoolContainerID(nsPath(c3)), "eth0")
	if len(left) != 2 || !slices.Contains(left, id3) || !slices.Contains(left, e4.ID) {
		t.Errorf("endpoints after cnitool gc: %v, want %s (another CNI network) and %s (the CLI's)", left, id3, e4.ID)
	}
}

// cniError runs xlane-cni directly (as a runtime does) and returns the
// spec error it printed, or nil when it succeeded.
func cniError(t *testing.T, netns, cmd, containerID, cniNetns, stdin string) *types.Error {
	t.Helper()
	c := inNS(netns, filepath.Join(binDir, "xlane-cni"))
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+cniNetns,
		"CNI_IFNAME=eth0", "CNI_PATH="+binDir)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.Output()
	if err == nil {
		return nil
	}
	var e types.Error
	if jerr := json.Unmarshal(out, &e); jerr != nil {
		t.Fatalf("xlane-cni %s: %v, and its output is not a spec error: %q", cmd, err, out)
	}
	return &e
}

// TestCNIErrors checks the spec's error codes and that the message names
// the key or variable at fault, a restart of xlaned (attachments kept), and
// device auto's fallback where the kernel has no netkit.
func TestCNIErrors(t *testing.T) {
	n := newNode(t)
	xnet := "err" + suffix()
	conf := func(extra string) string {
		return `{"cniVersion":"1.1.0","name":"errs","type":"xlane-cni","socket":"` + n.socket + `","network":"` + xnet + `"` + extra + `}`
	}
	subnets := `,"subnets":["10.212.0.0/30","fd00:212::/64"]`
	c := newNetns(t, "c")
	for _, tc := range []struct {
		name, cmd, stdin, netns string
		code                    uint
		msg                     string
	}{
		{"not JSON", "ADD", `{"cniVersion":"1.1.0",`, nsPath(c), types.ErrDecodingFailure, ""},
		{"wrong type", "ADD", conf(`,"mtu":"big"`), nsPath(c), types.ErrDecodingFailure, `"mtu"`},
		{"bad mode", "ADD", conf(`,"mode":"fast"`), nsPath(c), types.ErrInvalidNetworkConfig, `"mode"`},
		{"bad subnet", "ADD", conf(`,"subnets":["10.1.0.0/33"]`), nsPath(c), types.ErrInvalidNetworkConfig, `"subnets"`},
		{"unknown network", "ADD", conf(""), nsPath(c), types.ErrInvalidNetworkConfig, `"network"`},
		{"no netns", "ADD", conf(subnets), "", types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"netns not a netns", "ADD", conf(subnets), "/proc/self/exe", types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"netkit here", "ADD", conf(subnets + `,"device":"netkit"`), nsPath(c), types.ErrInvalidNetworkConfig, "netkit"},
		{"status of a missing network", "STATUS", strings.Replace(conf(""), xnet, "nosuch", 1), "", 50, `"nosuch"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := cniError(t, n.netns, tc.cmd, "ctr1", tc.netns, tc.stdin)
			if e == nil || e.Code != tc.code || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("%s: got %+v, want code %d naming %s", tc.cmd, e, tc.code, tc.msg)
			}
		})
	}
	t.Run("exhausted", func(t *testing.T) {
		// A /30 holds one endpoint: STATUS is 51 once it is taken.
		if e := cniError(t, n.netns, "ADD", "ctr1", nsPath(c), conf(subnets+`,"device":"auto"`)); e != nil {
			t.Fatalf("ADD: %+v", e)
		}
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", "ctr1:eth0")
		var nw api.NetworkInfo
		n.mustXlane(&nw, "network", "inspect", xnet)
		if nw.Devices() != model.DeviceVeth {
			t.Errorf("device auto on a kernel without netkit: %s, want veth", nw.Devices())
		}
		if e := cniError(t, n.netns, "STATUS", "", "", conf(subnets)); e == nil || e.Code != 51 || !strings.Contains(e.Msg, "no free address") {
			t.Errorf("STATUS of a full network: %+v, want 51", e)
		}
		c2 := newNetns(t, "c")
		if e := cniError(t, n.netns, "ADD", "ctr2", nsPath(c2), conf(subnets)); e == nil || !strings.Contains(e.Msg, "no free address") {
			t.Errorf("ADD to a full network: %+v, want an error", e)
		}
	})
	t.Run("existing network", func(t *testing.T) {
		// The configuration's mode and device must be the network's.
		c2 := newNetns(t, "c")
		for key, extra := range map[string]string{`"mode"`: `,"mode":"kernel"`, `"device"`: `,"device":"netkit-l2"`} {
			if e := cniError(t, n.netns, "ADD", "ctr9", nsPath(c2), conf(subnets+extra)); e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, key) {
				t.Errorf("ADD with %s: %+v, want 7 naming %s", extra, e, key)
			}
		}
		if e := cniError(t, n.netns, "ADD", "ctr9", nsPath(c2), conf(subnets+`,"mode":"tc","device":"auto"`)); e == nil || !strings.Contains(e.Msg, "no free address") {
			t.Errorf("ADD with the network's mode and device: %+v, want only the full pool refused", e)
		}
	})
	t.Run("repeated ADD", func(t *testing.T) {
		// The same key and netns: the same attachment (a runtime's
		// retry); another netns: a conflict.
		before, err := n.client().Attachment(context.Background(), "ctr1", "eth0")
		if err != nil {
			t.Fatal(err)
		}
		if e := cniError(t, n.netns, "ADD", "ctr1", nsPath(c), conf(subnets)); e != nil {
			t.Errorf("repeated ADD: %+v", e)
		}
		after, err := n.client().Attachment(context.Background(), "ctr1", "eth0")
		if err != nil || !slices.Equal(after.IPs, before.IPs) || after.HostIf != before.HostIf {
			t.Errorf("after a repeated ADD: %+v %v, was %+v", after, err, before)
		}
		c2 := newNetns(t, "c")
		if e := cniError(t, n.netns, "ADD", "ctr1", nsPath(c2), conf(subnets)); e == nil || !strings.Contains(e.Msg, "attached already") {
			t.Errorf("ADD of the same key in another netns: %+v, want a conflict", e)
		}
	})
	t.Run("restart", func(t *testing.T) {
		// The attachment outlives a kill -9 of xlaned; while it is down,
		// ADD and DEL say try again later and STATUS 50.
		n.stop(syscall.SIGKILL)
		if e := cniError(t, n.netns, "DEL", "ctr1", nsPath(c), conf(subnets)); e == nil || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, `"socket"`) {
			t.Errorf("DEL with xlaned down: %+v, want 11 naming the socket", e)
		}
		if e := cniError(t, n.netns, "ADD", "ctr3", nsPath(c), conf(subnets)); e == nil || e.Code != types.ErrTryAgainLater {
			t.Errorf("ADD with xlaned down: %+v, want 11", e)
		}
		if e := cniError(t, n.netns, "STATUS", "", "", conf(subnets)); e == nil || e.Code != 50 {
			t.Errorf("STATUS with xlaned down: %+v, want 50", e)
		}
		n.start()
		ep, err := n.client().Attachment(context.Background(), "ctr1", "eth0")
		if err != nil || ep.State != "ready" {
			t.Fatalf("attachment after restart: %+v %v", ep, err)
		}
		ping(t, c, netip.MustParseAddr("10.212.0.1"))
		// DEL with the host device already gone (deleted by hand).
		runIn(t, n.netns, "ip", "link", "del", ep.HostIf)
		if e := cniError(t, n.netns, "DEL", "ctr1", nsPath(c), conf(subnets)); e != nil {
			t.Errorf("DEL: %+v", e)
		}
		if _, err := n.client().Attachment(context.Background(), "ctr1", "eth0"); err == nil {
			t.Errorf("attachment still there after DEL")
		}
		if e := cniError(t, n.netns, "STATUS", "", "", conf(subnets)); e != nil {
			t.Errorf("STATUS after DEL freed the address: %+v", e)
		}
	})
}

// TestCNIPortMappings publishes a pod's port with xlane's own datapath (the
// portMappings capability on xlane-cni, Kubernetes' hostPort) in tc mode,
// where portmap's iptables DNAT cannot work (TestCNIChain): reached from
// outside the node, IPv4 and IPv6, SHA-256-checked; withdrawn by DEL; a
// hostIP that is no address is refused naming the key.
func TestCNIPortMappings(t *testing.T) {
	var out string
	n := newNode(t, withOutsideRoutes(&out, "1500", false))
	h := newCNIHost(t, n)
	name := "ports-" + suffix()
	h.conf(name, "1.1.0", h.xlanePlugin("ports"+suffix(), map[string]any{"mode": "tc", "capabilities": map[string]any{"portMappings": true}}))
	c := newNetns(t, "c")
	capArgs := []string{`CAP_ARGS={"portMappings":[{"hostPort":18080,"containerPort":8080,"protocol":"tcp"}]}`}
	addrs := resultAddrs(t, parseResult(t, "1.1.0", h.mustCNITool(capArgs, "add", name, nsPath(c))), "eth0")
	node4, node6 := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8:83::2")
	transferVia(t, out, c, netip.AddrPortFrom(addrs[0].Addr(), 8080), netip.AddrPortFrom(node4, 18080), 4<<20)
	transferVia(t, out, c, netip.AddrPortFrom(addrs[1].Addr(), 8080), netip.AddrPortFrom(node6, 18080), 4<<20)
	h.mustCNITool(capArgs, "del", name, nsPath(c))
	if err := dialOnce(out, netip.AddrPortFrom(node4, 18080)); err == nil {
		t.Errorf("port 18080 still answers after DEL")
	}
	bad := []string{`CAP_ARGS={"portMappings":[{"hostPort":18080,"containerPort":8080,"protocol":"tcp","hostIP":"the-node"}]}`}
	if _, stderr, err := h.cnitool(bad, "add", name, nsPath(c)); err == nil || !strings.Contains(stderr, "runtimeConfig.portMappings") {
		t.Errorf("hostIP not an address: err %v %q, want a refusal naming runtimeConfig.portMappings", err, stderr)
	}
	if eps, err := n.client().Endpoints(context.Background(), ""); err != nil || len(eps) != 0 {
		t.Errorf("endpoints after a refused ADD: %+v %v", eps, err)
	}
}

// TestCNIHostPortHostIP is Kubernetes' Conformance spec "HostPort validates
// that there is no conflict between pods with same hostPort but different
// hostIP and protocol" on xlane-cni's portMappings: pod p1 publishes 54323
// on 127.0.0.1, p2 on the node's address (TCP), p3 on the node's address
// (UDP); the node's own processes (a hostNetwork pod) reach each one on its
// address, the outside reaches p2; and a pod's hostPort without a hostIP
// is reachable on the node's 127.0.0.1 too (as docker-proxy makes a
// Docker -p port), not only on its address.
func TestCNIHostPortHostIP(t *testing.T) {
	var out string
	n := newNode(t, withOutsideRoutes(&out, "1500", false))
	h := newCNIHost(t, n)
	name := "hostip-" + suffix()
	h.conf(name, "1.1.0", h.xlanePlugin("hostip"+suffix(), map[string]any{"mode": "tc", "capabilities": map[string]any{"portMappings": true}}))
	node4 := netip.MustParseAddr("192.0.2.2")
	pods := []struct {
		name, proto, hostIP string
		hostPort            int
	}{
		{"p1", "tcp", "127.0.0.1", 54323},
		{"p2", "tcp", "192.0.2.2", 54323},
		{"p3", "udp", "192.0.2.2", 54323},
		{"p4", "tcp", "", 54324},
	}
	for _, p := range pods {
		c := newNetns(t, p.name)
		capArgs := []string{fmt.Sprintf(`CAP_ARGS={"portMappings":[{"hostPort":%d,"containerPort":8080,"protocol":%q,"hostIP":%q}]}`, p.hostPort, p.proto, p.hostIP)}
		addrs := resultAddrs(t, parseResult(t, "1.1.0", h.mustCNITool(capArgs, "add", name, nsPath(c))), "eth0")
		t.Cleanup(func() { h.cnitool(capArgs, "del", name, nsPath(c)) })
		if p.proto == "udp" {
			udpEchoIn(t, c, netip.AddrPortFrom(addrs[0].Addr(), 8080))
		} else {
			startNameServer(t, c, p.name, netip.AddrPortFrom(addrs[0].Addr(), 8080))
		}
	}
	for _, c := range []struct {
		from, want string
		dst        netip.AddrPort
	}{
		{n.netns, "p1", netip.MustParseAddrPort("127.0.0.1:54323")},
		{n.netns, "p2", netip.AddrPortFrom(node4, 54323)},
		{out, "p2", netip.AddrPortFrom(node4, 54323)},
		{n.netns, "p4", netip.MustParseAddrPort("127.0.0.1:54324")},
		{n.netns, "p4", netip.AddrPortFrom(node4, 54324)},
	} {
		if got := dialVIP(t, c.from, c.dst).backend; got != c.want {
			t.Errorf("%v from %s: answered by %s, want %s", c.dst, c.from, got, c.want)
		}
	}
	if err := udpAsk(n.netns, netip.AddrPortFrom(node4, 54323), 2*time.Second); err != nil {
		t.Errorf("udp %v:54323 from the node: %v", node4, err)
	}
	// 127.0.0.1 is p1's alone: the outside's 192.0.2.2:54323/udp is p3's.
	if err := udpAsk(out, netip.AddrPortFrom(node4, 54323), 2*time.Second); err != nil {
		t.Errorf("udp %v:54323 from outside: %v", node4, err)
	}
	// A fifth pod asking for p2's hostIP, port and protocol is refused.
	c := newNetns(t, "p5")
	capArgs := []string{`CAP_ARGS={"portMappings":[{"hostPort":54323,"containerPort":8080,"protocol":"tcp","hostIP":"192.0.2.2"}]}`}
	if _, stderr, err := h.cnitool(capArgs, "add", name, nsPath(c)); err == nil || !strings.Contains(stderr, "published by endpoint") {
		t.Errorf("a second pod on p2's hostIP:hostPort/tcp: err %v %q, want a conflict", err, stderr)
	}
}
