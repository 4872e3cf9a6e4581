package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// Every bad request fails with a message naming the field and the reason,
// exits non-zero, and changes nothing.
func TestCLIBadInput(t *testing.T) {
	n := newNode(t)
	n.mustXlane(nil, "network", "create", "good", "--subnet", "10.78.0.0/24", "--subnet", "fd00:78::/64")
	c := newNetns(t, "c")
	var first api.EndpointInfo
	n.mustXlane(&first, "endpoint", "add", "good", "--netns", c, "--id", "first")

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"bad prefix length", []string{"network", "create", "x", "--subnet", "10.0.0.0/33"}, `subnets "10.0.0.0/33": invalid prefix length`},
		{"not a prefix", []string{"network", "create", "x", "--subnet", "banana"}, `subnets "banana": not a CIDR prefix`},
		{"host bits", []string{"network", "create", "x", "--subnet", "10.9.0.5/24"}, `subnets "10.9.0.5/24": host bits set (did you mean 10.9.0.0/24?)`},
		{"no subnet", []string{"network", "create", "x"}, `subnets missing`},
		{"two ipv4 subnets", []string{"network", "create", "x", "--subnet", "10.9.0.0/24", "--subnet", "10.9.1.0/24"}, `at most one IPv4 and one IPv6 subnet`},
		{"bad mode", []string{"network", "create", "x", "--subnet", "10.9.0.0/24", "--mode", "warp"}, `mode "warp": unknown mode`},
		{"bad mtu", []string{"network", "create", "x", "--subnet", "10.9.0.0/24", "--mtu", "70000"}, `mtu 70000: must be between 576 and 65535`},
		{"ipv6 mtu", []string{"network", "create", "x", "--subnet", "fd00:9::/64", "--mtu", "1000"}, `mtu 1000: must be between 1280`},
		{"bad name", []string{"network", "create", "no/slash", "--subnet", "10.9.0.0/24"}, `name "no/slash"`},
		{"gateway outside", []string{"network", "create", "x", "--subnet", "10.9.0.0/24", "--gateway", "10.8.0.1"}, `gateways "10.8.0.1": not in any subnet`},
		{"duplicate name", []string{"network", "create", "good", "--subnet", "10.9.0.0/24"}, `network "good" already exists`},
		{"overlap", []string{"network", "create", "x", "--subnet", "10.78.0.128/25"}, `overlaps 10.78.0.0/24 of network "good"`},
		{"missing network", []string{"endpoint", "add", "nope", "--netns", c}, `network "nope": no such network`},
		{"missing netns", []string{"endpoint", "add", "good", "--netns", "xle-does-not-exist"}, `netns "xle-does-not-exist": no such network namespace`},
		{"not a netns", []string{"endpoint", "add", "good", "--netns", "/etc/hostname"}, `not a network namespace`},
		{"no netns", []string{"endpoint", "add", "good"}, `netns missing`},
		{"bad ip", []string{"endpoint", "add", "good", "--netns", c, "--ip", "10.78.0.300", "--ifname", "eth1"}, `ips "10.78.0.300": not an IP address`},
		{"ip outside", []string{"endpoint", "add", "good", "--netns", c, "--ip", "10.79.0.5", "--ifname", "eth1"}, `ips "10.79.0.5": not in any subnet`},
		{"ip is gateway", []string{"endpoint", "add", "good", "--netns", c, "--ip", "10.78.0.1", "--ifname", "eth1"}, `reserved in subnet`},
		{"ip taken", []string{"endpoint", "add", "good", "--netns", c, "--ip", first.IPs[0].String(), "--ifname", "eth1"}, `already leased to endpoint first`},
		{"ifname taken", []string{"endpoint", "add", "good", "--netns", c}, `ifname "eth0" already exists`},
		{"ifname too long", []string{"endpoint", "add", "good", "--netns", c, "--ifname", "a-very-long-interface"}, `ifname "a-very-long-interface"`},
		{"duplicate id", []string{"endpoint", "add", "good", "--netns", c, "--id", "first", "--ifname", "eth1"}, `endpoint "first" already exists`},
		{"network in use", []string{"network", "rm", "good"}, `has 1 endpoints`},
		{"bad output", []string{"network", "ls", "-o", "yaml"}, `--output "yaml"`},
	}
	before := runIn(t, n.netns, "ip", "-o", "link")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, err := n.xlane(tc.args...)
			if err == nil {
				t.Fatalf("xlane %s succeeded, want an error", strings.Join(tc.args, " "))
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("xlane %s: stderr %q, want it to contain %q", strings.Join(tc.args, " "), stderr, tc.want)
			}
		})
	}
	if after := runIn(t, n.netns, "ip", "-o", "link"); after != before {
		t.Errorf("failed requests changed the node's links:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	var nets []api.NetworkInfo
	n.mustXlane(&nets, "network", "ls")
	if len(nets) != 1 || nets[0].Endpoints != 1 {
		t.Errorf("after failed requests: networks %+v, want only 'good' with 1 endpoint", nets)
	}
	// The failed "ip taken" add took no lease: the next endpoint gets the
	// next address after first's.
	var second api.EndpointInfo
	n.mustXlane(&second, "endpoint", "add", "good", "--netns", c, "--ifname", "eth1")
	if want := first.IPs[0].Next(); second.IPs[0] != want {
		t.Errorf("second endpoint got %v, want %v (a failed add leaked a lease?)", second.IPs[0], want)
	}
}

func TestIdempotentDeletes(t *testing.T) {
	n := newNode(t)
	for _, args := range [][]string{
		{"endpoint", "rm", "never-existed"},
		{"network", "rm", "never-existed"},
	} {
		if _, stderr, err := n.xlane(args...); err != nil {
			t.Errorf("xlane %s: %v (%s), want success", strings.Join(args, " "), err, stderr)
		}
	}
	n.mustXlane(nil, "network", "create", "twice", "--subnet", "10.80.0.0/24")
	c := newNetns(t, "c")
	n.mustXlane(nil, "endpoint", "add", "twice", "--netns", c, "--id", "e1")
	for i := 0; i < 2; i++ {
		n.mustXlane(nil, "endpoint", "rm", "e1")
	}
	for i := 0; i < 2; i++ {
		n.mustXlane(nil, "network", "rm", "twice")
	}
	// --force removes endpoints with the network.
	n.mustXlane(nil, "network", "create", "forced", "--subnet", "10.81.0.0/24", "--mode", "kernel")
	n.mustXlane(nil, "endpoint", "add", "forced", "--netns", c, "--id", "e2")
	n.mustXlane(nil, "network", "rm", "forced", "--force")
	if _, err := n.client().Endpoint(context.Background(), "e2"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("endpoint e2 after network rm --force: %v, want not found", err)
	}
	assertCleanNamed(t, n, "10.80.", "10.81.")
}

func assertCleanNamed(t *testing.T, n *node, prefixes ...string) {
	t.Helper()
	links := runIn(t, n.netns, "ip", "-o", "link", "show")
	if strings.Contains(links, "xlh") || strings.Contains(links, "xlc") || strings.Contains(links, "xlv") {
		t.Errorf("veths or taps left behind:\n%s", links)
	}
	all := runIn(t, n.netns, "ip", "route", "show", "table", "all") + runIn(t, n.netns, "ip", "addr")
	for _, p := range prefixes {
		if strings.Contains(all, p) {
			t.Errorf("%s left behind:\n%s", p, all)
		}
	}
}

// The raw API rejects malformed bodies, unknown fields and paths with typed
// errors.
func TestAPIErrors(t *testing.T) {
	n := newNode(t)
	hc := &http.Client{Transport: &http.Transport{Dial: func(_, _ string) (net.Conn, error) { return net.Dial("unix", n.socket) }}}
	cases := []struct {
		method, path, body string
		status             int
		code, field        string
	}{
		{"POST", api.PathNetworks, `{"name": "x", "subnets": ["10.1.0.0/24"], "colour": "red"}`, 400, api.CodeInvalid, "colour"},
		{"POST", api.PathNetworks, `{"name": "x", "subnets": "10.1.0.0/24"}`, 400, api.CodeInvalid, "subnets"},
		{"POST", api.PathNetworks, `{"name": `, 400, api.CodeInvalid, "body"},
		{"POST", api.PathNetworks, `{"name": "x", "subnets": ["10.1.0.0/24"], "mtu": 100}`, 400, api.CodeInvalid, "mtu"},
		{"POST", api.PathEndpoints, `{"network": "missing", "netns": "x"}`, 400, api.CodeInvalid, "network"},
		{"GET", api.PathNetworks + "/missing", ``, 404, api.CodeNotFound, ""},
		{"GET", api.PathEndpoints + "/missing", ``, 404, api.CodeNotFound, ""},
		{"GET", "/v2/teapot", ``, 404, api.CodeNotFound, ""},
		{"PUT", api.PathStatus, ``, 404, api.CodeNotFound, ""},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, "http://xlane"+tc.path, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s %s: status %d, want %d (%s)", tc.method, tc.path, tc.body, resp.StatusCode, tc.status, body)
			continue
		}
		if !strings.Contains(string(body), `"code": "`+tc.code+`"`) || tc.field != "" && !strings.Contains(string(body), `"field": "`+tc.field+`"`) {
			t.Errorf("%s %s %s: body %s, want code %s field %q", tc.method, tc.path, tc.body, body, tc.code, tc.field)
		}
	}
}

// Without --mode a network asks for auto, which resolves to the mode that
// measured best here and says why.
func TestAutoMode(t *testing.T) {
	n := newNode(t)
	var net api.NetworkInfo
	n.mustXlane(&net, "network", "create", "a", "--subnet", "10.86.0.0/24")
	if net.Mode != "tc" || net.ModeRequested != "auto" || !strings.Contains(net.ModeReason, "benchmarks.md") {
		t.Fatalf("default network: mode %q requested %q reason %q; want tc chosen by auto with its reason", net.Mode, net.ModeRequested, net.ModeReason)
	}
	var upd api.NetworkInfo
	n.mustXlane(&upd, "network", "update", "a", "--mode", "xdp")
	if upd.Mode != "xdp" || upd.ModeReason != "" {
		t.Fatalf("after update to xdp: mode %q reason %q", upd.Mode, upd.ModeReason)
	}
	var back api.NetworkInfo
	n.mustXlane(&back, "network", "update", "a", "--mode", "auto")
	if back.Mode != "tc" || back.ModeRequested != "auto" {
		t.Fatalf("after update to auto: mode %q requested %q, want tc/auto", back.Mode, back.ModeRequested)
	}
}

// xlaned --uninstall leaves nothing: no veth, route, address, pin or state.
func TestUninstall(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	n.mustXlane(nil, "network", "create", "u", "--subnet", "10.89.0.0/24", "--subnet", "fd00:89::/64")
	// A kernel-mode network has an nftables guard against unsolicited
	// traffic from off the node (netconf/guard.go).
	n.mustXlane(nil, "network", "create", "k", "--subnet", "10.88.0.0/24", "--mode", "kernel")
	if x := runIn(t, n.netns, "nft", "list", "tables"); !strings.Contains(x, "xlane_guard") {
		t.Fatalf("no guard table for the kernel-mode network:\n%s", x)
	}
	c := newNetns(t, "c")
	var ep api.EndpointInfo
	n.mustXlane(&ep, "endpoint", "add", "u", "--netns", c)
	n.mustXlane(nil, "endpoint", "publish", ep.ID, "--port", "8081:80")
	n.mustXlane(nil, "service", "create", "s", "--vip", "10.97.0.1:80", "--backend", ep.IPs[0].String()+":80")
	n.stop(syscall.SIGTERM)
	args := append([]string{filepath.Join(binDir, "xlaned"), "--uninstall",
		"--state", filepath.Join(n.dir, "state.db"), "--socket", n.socket, "--pin-dir", n.pinDir}, n.flags...)
	if o, err := inNS(n.netns, args...).CombinedOutput(); err != nil {
		t.Fatalf("xlaned --uninstall: %v\n%s", err, o)
	}
	assertCleanNamed(t, n, "10.89.", "fd00:89")
	assertCleanNamed(t, n, "10.88.", "fd00:88")
	if x := runIn(t, n.netns, "nft", "list", "tables"); strings.Contains(x, "xlane") {
		t.Errorf("nftables tables left:\n%s", x)
	}
	if _, err := os.Stat(n.pinDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin dir %s still there: %v", n.pinDir, err)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "state.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file still there: %v", err)
	}
	if x := runIn(t, n.netns, "ip", "link", "show", "up0"); strings.Contains(x, "xdp") {
		t.Errorf("uplink still carries XDP:\n%s", x)
	}
}
