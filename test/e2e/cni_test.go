package e2e

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

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
// netns is gone.
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
			if ver == version.All.SupportedVersions()[0] {
				return // the first stays: the others send traffic to it
			}
			h.mustCNITool(nil, "del", name, nsPath(c))
			if _, err := n.client().Endpoint(context.Background(), id); err == nil {
				t.Errorf("endpoint %s still there after DEL", id)
			}
			h.mustCNITool(nil, "del", name, nsPath(c)) // again: nothing to do
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
