package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// udpAsk sends a datagram from netns to dst on a connected socket and
// waits for the answer (nil: answered).
func udpAsk(netns string, dst netip.AddrPort, timeout time.Duration) error {
	return udpRefused(netns, dst.Addr(), int(dst.Port()), timeout)
}

// The firewall and the services as Kubernetes uses them, with real
// traffic, in a tc network that masquerades and lets flows from off the
// node in (the Kubernetes ConfigMap's settings):
//
//	outside (out0) --- up0 [node] --- c1 (client)
//	                          |------ c2 (server :8080 tcp, :5353 udp)
//	VIP 10.96.0.10:80/tcp, [fd00:96::10]:80/tcp -> c2:8080
//	VIP 10.96.0.10:53/udp, [fd00:96::10]:53/udp -> c2:5353
//	VIP 10.96.0.20:80/tcp, :53/udp: no backend
//	VIP 10.96.0.30:443/tcp, [fd00:96::30]:443/tcp -> the node's own
//	    192.0.2.2:6443, [2001:db8:83::2]:6443 (a hostNetwork backend)
func TestServicePolicyFlows(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	runIn(t, out, "ip", "route", "add", "10.96.0.0/24", "via", "192.0.2.2")
	runIn(t, out, "ip", "-6", "route", "add", "fd00:96::/64", "via", "2001:db8:83::2")
	n.mustXlane(nil, "network", "create", "k8s", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64",
		"--mode", "tc", "--allow-unsolicited")
	c1, c2 := newNetns(t, "c1"), newNetns(t, "c2")
	var e1, e2 api.EndpointInfo
	n.mustXlane(&e1, "endpoint", "add", "k8s", "--netns", c1)
	n.mustXlane(&e2, "endpoint", "add", "k8s", "--netns", c2)
	env := &fwEnv{n: n, dir: t.TempDir()}
	type fam struct {
		name             string
		srv, node        netip.Addr
		vip, empty, host netip.Addr
	}
	fams := []fam{
		{"ipv4", e2.IPs[0], netip.MustParseAddr("192.0.2.2"),
			netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.20"), netip.MustParseAddr("10.96.0.30")},
		{"ipv6", e2.IPs[1], netip.MustParseAddr("2001:db8:83::2"),
			netip.MustParseAddr("fd00:96::10"), netip.MustParseAddr("fd00:96::20"), netip.MustParseAddr("fd00:96::30")},
	}
	for i, f := range fams {
		listen(t, c2, f.srv, 8080)
		udpEchoIn(t, c2, netip.AddrPortFrom(f.srv, 5353))
		n.mustXlane(nil, "service", "create", fmt.Sprintf("web%d", i), "--vip", netip.AddrPortFrom(f.vip, 80).String()+"/tcp",
			"--backend", netip.AddrPortFrom(f.srv, 8080).String())
		n.mustXlane(nil, "service", "create", fmt.Sprintf("dns%d", i), "--vip", netip.AddrPortFrom(f.vip, 53).String()+"/udp",
			"--backend", netip.AddrPortFrom(f.srv, 5353).String())
		// A backend of weight 0 takes no new flows: none to be had.
		n.mustXlane(nil, "service", "create", fmt.Sprintf("empty%d", i), "--vip", netip.AddrPortFrom(f.empty, 80).String()+"/tcp",
			"--backend", netip.AddrPortFrom(f.srv, 8080).String()+"@0")
		listen(t, n.netns, f.node, 6443)
		n.mustXlane(nil, "service", "create", fmt.Sprintf("host%d", i), "--vip", netip.AddrPortFrom(f.host, 443).String()+"/tcp",
			"--backend", netip.AddrPortFrom(f.node, 6443).String())
		n.mustXlane(nil, "service", "create", fmt.Sprintf("emptyu%d", i), "--vip", netip.AddrPortFrom(f.empty, 53).String()+"/udp",
			"--backend", netip.AddrPortFrom(f.srv, 5353).String()+"@0")
	}

	// No rule set (conntrack is the datapath's alone).
	t.Run("outside opens a flow to a masquerading pod", func(t *testing.T) {
		for _, f := range fams {
			if err := dial(out, f.srv, 8080, 3*time.Second); err != nil {
				t.Errorf("%s: outside -> c2 %v:8080: %v (the SYN-ACK masqueraded?)", f.name, f.srv, err)
			}
			if err := udpAsk(out, netip.AddrPortFrom(f.srv, 5353), 2*time.Second); err != nil {
				t.Errorf("%s: outside -> c2 %v:5353/udp: %v", f.name, f.srv, err)
			}
		}
	})
	t.Run("a backend on the node's own address", func(t *testing.T) {
		for _, f := range fams {
			if err := dial(c1, f.host, 443, 3*time.Second); err != nil {
				t.Errorf("%s: c1 -> VIP %v:443 -> the node's %v:6443: %v (the answer from the node's address?)", f.name, f.host, f.node, err)
			}
		}
	})
	t.Run("no backend is refused", func(t *testing.T) {
		// The node's own processes too: the socket hooks refuse the
		// connect() (bpf/sock_lb.c), counted as drop_no_backend, hook sock.
		before := sockNoBackend(t, n)
		for _, from := range []string{c1, out, n.netns} {
			for _, f := range fams {
				start := time.Now()
				err := dial(from, f.empty, 80, 3*time.Second)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s: TCP to %v:80 without backends from %s: %v, want connection refused", f.name, f.empty, from, err)
				} else if d := time.Since(start); d > time.Second {
					t.Errorf("%s: refused after %v", f.name, d)
				}
				if err := udpAsk(from, netip.AddrPortFrom(f.empty, 53), 2*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s: UDP to %v:53 without backends from %s: %v, want connection refused (ICMP port unreachable)", f.name, f.empty, from, err)
				}
			}
		}
		if got := sockNoBackend(t, n) - before; got < 4 {
			t.Errorf("drop_no_backend of the node's socket hooks: %d more, want 4 (TCP and UDP, IPv4 and IPv6)", got)
		}
	})
	t.Run("an ingress-isolated pod's service flows", func(t *testing.T) {
		env.mustApply(t, "isolated.yaml", fmt.Sprintf(`established: true
rules:
  - {name: c1-isolated, scope: endpoint:%s, direction: to-endpoint, action: drop}
`, e1.ID))
		for _, f := range fams {
			if err := dial(c1, f.srv, 8080, 3*time.Second); err != nil {
				t.Errorf("%s: c1 -> c2 directly: %v", f.name, err)
			}
			if err := dial(c1, f.vip, 80, 3*time.Second); err != nil {
				t.Errorf("%s: c1 -> VIP -> c2: %v (the SYN-ACK taken for a new flow)", f.name, err)
			}
			if err := udpAsk(c1, netip.AddrPortFrom(f.vip, 53), 2*time.Second); err != nil {
				t.Errorf("%s: c1 -> VIP/udp -> c2: %v", f.name, err)
			}
			// The rule holds: c2 cannot open a flow to c1.
			listen(t, c1, e1.IPs[map[string]int{"ipv4": 0, "ipv6": 1}[f.name]], 9090)
			if err := dial(c2, e1.IPs[map[string]int{"ipv4": 0, "ipv6": 1}[f.name]], 9090, time.Second); err == nil {
				t.Errorf("%s: c2 -> c1 connected: the isolation rule does not hold", f.name)
			}
		}
	})
	t.Run("egress judged on the backend", func(t *testing.T) {
		env.mustApply(t, "except.yaml", fmt.Sprintf(`established: true
defaults:
  - {scope: endpoint:%[1]s, direction: from-endpoint, action: drop}
rules:
  - {name: except-c2, scope: endpoint:%[1]s, direction: from-endpoint, dst: [%[2]s/32, %[3]s/128], action: drop}
  - {name: cidr, scope: endpoint:%[1]s, direction: from-endpoint, dst: [0.0.0.0/4, "fd00::/8"], action: allow}
`, e1.ID, e2.IPs[0], e2.IPs[1]))
		for _, f := range fams {
			if err := dial(c1, f.srv, 8080, time.Second); err == nil {
				t.Errorf("%s: c1 -> c2 directly connected through the except", f.name)
			}
			if err := dial(c1, f.vip, 80, time.Second); err == nil {
				t.Errorf("%s: c1 -> VIP -> c2 connected: the policy was judged on the VIP", f.name)
			}
		}
		// Allowed to the backend only: the VIP's flows get through.
		env.mustApply(t, "only.yaml", fmt.Sprintf(`established: true
defaults:
  - {scope: endpoint:%[1]s, direction: from-endpoint, action: drop}
rules:
  - {name: c2, scope: endpoint:%[1]s, direction: from-endpoint, dst: [%[2]s/32, %[3]s/128], action: allow}
`, e1.ID, e2.IPs[0], e2.IPs[1]))
		for _, f := range fams {
			if err := dial(c1, f.vip, 80, 3*time.Second); err != nil {
				t.Errorf("%s: c1 -> VIP -> c2 (c2 allowed): %v", f.name, err)
			}
			if err := udpAsk(c1, netip.AddrPortFrom(f.vip, 53), 2*time.Second); err != nil {
				t.Errorf("%s: c1 -> VIP/udp -> c2 (c2 allowed): %v", f.name, err)
			}
		}
	})
}

// sockNoBackend is the count of the node's socket hooks' drop_no_backend
// (a connect or sendmsg to a VIP without backends refused).
func sockNoBackend(t *testing.T, n *node) uint64 {
	t.Helper()
	var d api.MapDump
	n.mustXlane(&d, "bpf", "dump", "metrics")
	var sum uint64
	for _, e := range d.Entries {
		if fmt.Sprint(e["hook"]) == "sock" && fmt.Sprint(e["reason"]) == "drop_no_backend" {
			var p uint64
			fmt.Sscan(fmt.Sprint(e["packets"]), &p)
			sum += p
		}
	}
	return sum
}
