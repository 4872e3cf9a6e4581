package e2e

import (
	"crypto/sha256"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

var (
	outside4 = netip.MustParseAddr("192.168.77.100")
	outside6 = netip.MustParseAddr("fd00:77::100")
)

// outsideClient puts a namespace on the underlay bridge of namespace ul,
// at outside4 and outside6, with no route beyond the underlay's subnets.
func outsideClient(t *testing.T, ul string) string {
	t.Helper()
	out := newNetns(t, "out")
	run(t, "ip", "-n", ul, "link", "add", "pout", "type", "veth", "peer", "name", "eth0", "netns", out)
	run(t, "ip", "-n", ul, "link", "set", "pout", "master", "br0", "up")
	runIn(t, out, "ip", "addr", "add", outside4.String()+"/24", "dev", "eth0")
	runIn(t, out, "ip", "addr", "add", outside6.String()+"/64", "dev", "eth0", "nodad")
	runIn(t, out, "ip", "link", "set", "eth0", "up")
	runIn(t, out, "ip", "link", "set", "lo", "up")
	return out
}

// routeVIPs routes the external VIPs (10.96.0.0/16, fd00:96::/64) of the
// outside client's namespace through the node at v4 and v6.
func routeVIPs(t *testing.T, out string, v4, v6 netip.Addr) {
	t.Helper()
	runIn(t, out, "ip", "route", "add", "10.96.0.0/16", "via", v4.String())
	runIn(t, out, "ip", "-6", "route", "add", "fd00:96::/64", "via", v6.String())
}

// Services and published ports reached from off the cluster (issue 16,
// docs/multinode.md "From outside the cluster"): a client namespace on
// the underlay bridge, beside the two nodes, reaches n1's address (its
// uplink's, ul0) at NodePort-style services whose backends are n2's pod,
// n1's pod, or both, at an external VIP routed through n1, and at a port
// n1's pod publishes; SHA-256-checked TCP both ways.
//
//	out: 192.168.77.100, fd00:77::100 (no route to any pod; the VIPs 10.96.0.0/16, fd00:96::/64 via n1)
//	 |
//	br0 (namespace "ul") ------------------------+
//	 | ul0 192.168.77.1 (--uplink ul0)            | ul0 192.168.77.2 (--uplink ul0)
//	n1: pod 10.244.1.x, fd00:244:0:1::x          n2: pod 10.244.2.x, fd00:244:0:2::x
//
// A backend on the other node is reached from n1's cluster address (the
// first of its pod CIDR: 10.244.1.0, fd00:244:0:1::), so its reply comes
// back through n1 (externalTrafficPolicy Cluster); a backend on n1 sees
// the client's own address (what externalTrafficPolicy Local keeps). It
// runs on TestMultiNode's clusters (subtest "external" of each variant:
// its first two nodes, in the variant's mode, every node with --uplink
// ul0), which are set up once for both.
func testMultiNodeExternal(t *testing.T, cs []*clusterNode, routing string) {
	out := outsideClient(t, cs[0].ul)
	routeVIPs(t, out, cs[0].under4, cs[0].under6)
	n1, n2 := cs[0], cs[1]
	size := bulkSize(8<<20) / 2
	type fam struct {
		name         string
		client       netip.Addr
		node1, node2 netip.Addr // the nodes' uplink addresses
		cluster1     netip.Addr // n1's cluster address (its SNAT source)
		pod1, pod2   string     // the pods' addresses, as in IP:PORT
	}
	fams := []fam{
		{"ipv4", outside4, n1.under4, n2.under4, n1.pod4.Addr(), n1.ip4().String(), n2.ip4().String()},
		{"ipv6", outside6, n1.under6, n2.under6, n1.pod6.Addr(), "[" + n1.ip6().String() + "]", "[" + n2.ip6().String() + "]"},
	}
	// Published once for both families (the port belongs to the endpoint).
	n1.mustXlane(nil, "endpoint", "publish", n1.ep.ID, "--port", "8081:9081/tcp")
	for _, f := range fams {
		t.Run(f.name+"/published port", func(t *testing.T) {
			// Today's behaviour, from outside a cluster node: DNAT to the
			// local pod, the client's address kept.
			seen := exchangeVia(t, out, n1.pod, netip.AddrPortFrom(pick(f.name, n1.ip4(), n1.ip6()), 9081), netip.AddrPortFrom(f.node1, 8081), size)
			if seen.Addr() != f.client {
				t.Errorf("the pod saw the connection from %s, want the client's %s", seen, f.client)
			}
		})
	}
	for _, f := range fams {
		vip := func(port uint16) string { return netip.AddrPortFrom(f.node1, port).String() }
		t.Run(f.name+"/nodeport, backend on the other node", func(t *testing.T) {
			n1.mustXlane(nil, "service", "create", "remote-"+f.name, "--vip", vip(30080), "--backend", f.pod2+":9090")
			seen := exchangeVia(t, out, n2.pod, netip.AddrPortFrom(pick(f.name, n2.ip4(), n2.ip6()), 9090), netip.AddrPortFrom(f.node1, 30080), size)
			if seen.Addr() != f.cluster1 {
				t.Errorf("n2's pod saw the connection from %s, want n1's cluster address %s (SNAT, so that the reply comes back through n1)", seen, f.cluster1)
			}
		})
		t.Run(f.name+"/external VIP, backend on the other node", func(t *testing.T) {
			// An externalIP or LoadBalancer address the client routes
			// to n1: balanced as a NodePort is.
			ext := netip.AddrPortFrom(pick(f.name, netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("fd00:96::50")), 8080)
			n1.mustXlane(nil, "service", "create", "ext-"+f.name, "--vip", ext.String(), "--backend", f.pod2+":9095")
			seen := exchangeVia(t, out, n2.pod, netip.AddrPortFrom(pick(f.name, n2.ip4(), n2.ip6()), 9095), ext, size)
			if seen.Addr() != f.cluster1 {
				t.Errorf("n2's pod saw the connection from %s, want n1's cluster address %s", seen, f.cluster1)
			}
		})
		t.Run(f.name+"/nodeport, externalTrafficPolicy Local", func(t *testing.T) {
			// Local: only this node's backends (internal/k8s keeps them),
			// and the client's address reaches the pod.
			n1.mustXlane(nil, "service", "create", "local-"+f.name, "--vip", vip(30082), "--backend", f.pod1+":9092")
			seen := exchangeVia(t, out, n1.pod, netip.AddrPortFrom(pick(f.name, n1.ip4(), n1.ip6()), 9092), netip.AddrPortFrom(f.node1, 30082), size)
			if seen.Addr() != f.client {
				t.Errorf("n1's pod saw the connection from %s, want the client's %s", seen, f.client)
			}
			// Local with no endpoint on this node: no backend at all.
			n1.mustXlane(nil, "service", "create", "none-"+f.name, "--vip", vip(30083))
			before := uplinkCounter(t, n1, "ul0", "drop_no_backend")
			if err := dial(out, f.node1, 30083, 500*time.Millisecond); err == nil {
				t.Errorf("connected to a VIP without a backend")
			}
			if n := uplinkCounter(t, n1, "ul0", "drop_no_backend"); n <= before {
				t.Errorf("drop_no_backend on n1's ul0: %d, want more than %d", n, before)
			}
		})
		t.Run(f.name+"/nodeport, local backend, with a rule set on the node", func(t *testing.T) {
			// With a firewall rule set on n1, a new flow's first
			// packets to its pod take the Linux path to the pod's
			// firewall stage (pass_fw on the uplink): Linux forwards
			// them from the uplink, where xlaned turns IPv4 forwarding
			// on (a node's default is off; the maglev subtest's
			// connections through n2 to its own pod once failed there,
			// n2 keeping a rule set from TestMultiNode's firewall
			// subtest).
			rule := "outside-" + f.name
			n1.mustXlane(nil, "fw", "add", rule, "--direction", "to-endpoint", "--proto", "tcp", "--dport", "9", "--action", "drop")
			defer n1.mustXlane(nil, "fw", "rm", rule)
			before := uplinkCounter(t, n1, "ul0", "pass_fw")
			seen := exchangeVia(t, out, n1.pod, netip.AddrPortFrom(pick(f.name, n1.ip4(), n1.ip6()), 9092), netip.AddrPortFrom(f.node1, 30082), 1<<20)
			if seen.Addr() != f.client {
				t.Errorf("n1's pod saw the connection from %s, want the client's %s", seen, f.client)
			}
			if n := uplinkCounter(t, n1, "ul0", "pass_fw"); n <= before {
				t.Errorf("pass_fw on n1's ul0: %d, want more than %d (the flow did not take the Linux path)", n, before)
			}
		})
		t.Run(f.name+"/trace agrees", func(t *testing.T) {
			var res api.TraceResult
			n1.mustXlane(&res, "trace", "--from-ip", f.client.String(), "--to", vip(30080))
			var route string
			for _, h := range res.Hops {
				for _, s := range h.Stages {
					if s.Stage == "route" {
						route = s.Result
					}
				}
			}
			reasons := []string{"fwd_overlay"}
			if routing == "native" {
				reasons = []string{"fwd_fib", "fwd_neigh"}
			}
			if res.Verdict != "forward" || !slices.Contains(reasons, res.Reason) || !strings.Contains(route, "node "+n2.name) {
				t.Errorf("trace from %s to %s: %s (%s), route %q; want forward (%s) to node %s", f.client, vip(30080), res.Verdict, res.Reason, route, strings.Join(reasons, " or "), n2.name)
			}
			count := func() (n uint64) {
				for _, r := range reasons {
					n += uplinkCounter(t, n1, "ul0", r)
				}
				return n
			}
			before := count()
			acceptAndClose(listenIn(t, n2.pod, netip.AddrPortFrom(pick(f.name, n2.ip4(), n2.ip6()), 9090)))
			if err := dial(out, f.node1, 30080, 2*time.Second); err != nil {
				t.Errorf("connect to %s: %v", vip(30080), err)
			}
			if after := count(); after <= before {
				t.Errorf("%s on n1's ul0: %d before the connection, %d after: the real packets took another path than the trace", strings.Join(reasons, "+"), before, after)
			}
		})
		t.Run(f.name+"/maglev over both nodes", func(t *testing.T) {
			testExternalSpread(t, out, cs, f.name, f.client, []netip.Addr{f.node1, f.node2}, []string{f.pod1, f.pod2})
		})
		if routing != "native" { // natively routed, no overlay narrows the path
			t.Run(f.name+"/pmtu, backend on the other node", func(t *testing.T) {
				testExternalPMTU(t, out, n1, n2, f.name, f.node1, f.pod2, size)
			})
		}
		t.Run(f.name+"/port unreachable from the other node's backend", func(t *testing.T) {
			testExternalRefused(t, out, n1, f.name, f.node1, f.pod2)
		})
		t.Run(f.name+"/every node's pod to the outside, masqueraded", func(t *testing.T) {
			for _, c := range cs {
				dst := netip.AddrPortFrom(f.client, 9200)
				seen := exchangeVia(t, c.pod, out, dst, dst, 1<<20)
				if want := pick(f.name, c.under4, c.under6); seen.Addr() != want {
					t.Errorf("the outside client saw %s's pod from %s, want its node's address %s", c.name, seen, want)
				}
			}
		})
		t.Run(f.name+"/a pod through another node's NodePort, backend on its own node", func(t *testing.T) {
			// n2's pod to n1's NodePort (remote-<family>, backend n2's
			// pod): masqueraded to n2's address out of n2, DNATed and
			// SNATed on n1, tunnelled (or routed) back to n2; the reply
			// retraces it. The flow crosses the nodes twice.
			seen := exchangeVia(t, n2.pod, n2.pod, netip.AddrPortFrom(pick(f.name, n2.ip4(), n2.ip6()), 9090), netip.AddrPortFrom(f.node1, 30080), size)
			if seen.Addr() != f.cluster1 {
				t.Errorf("n2's pod saw its own connection through n1 from %s, want n1's cluster address %s", seen, f.cluster1)
			}
		})
	}
	t.Run("ipv4/nodeport, ports of closed flows taken again", func(t *testing.T) {
		testExternalPortReuse(t, out, n1, n2)
	})
	t.Run("backend on a peer found down", func(t *testing.T) {
		// n2 leaves the underlay without being removed: n1's probes mark
		// it down, and the outside client's flows to its pod are dropped
		// and counted on n1's uplink, not sent into the void.
		run(t, "ip", "-n", n1.ul, "link", "set", "p2", "down")
		waitPeerState(t, n1, "n2", model.PeerDown)
		before := uplinkCounter(t, n1, "ul0", "drop_peer_down")
		if err := dial(out, n1.under4, 30080, 500*time.Millisecond); err == nil {
			t.Errorf("connected to a backend on a down peer")
		}
		if n := uplinkCounter(t, n1, "ul0", "drop_peer_down"); n <= before {
			t.Errorf("drop_peer_down on n1's ul0: %d, want more than %d", n, before)
		}
		run(t, "ip", "-n", n1.ul, "link", "set", "p2", "up")
		waitPeerState(t, n1, "n2", model.PeerUp)
		waitPeerState(t, n2, "n1", model.PeerUp) // the reply's way
		exchangeVia(t, out, n2.pod, netip.AddrPortFrom(n2.ip4(), 9090), netip.AddrPortFrom(n1.under4, 30080), 1<<20)
	})
}

func pick(fam string, v4, v6 netip.Addr) netip.Addr {
	if fam == "ipv4" {
		return v4
	}
	return v6
}

// testExternalSpread: every node has the same service at its own address
// (a NodePort: each node's xlaned programs its own) with a backend pod on
// each node; the outside client connects to each node's over and over.
// Maglev spreads the flows over both backends (24 connections all on one
// of two: 2^-23), a node's own backend sees the client's address and the
// other node's sees the entry node's cluster address.
func testExternalSpread(t *testing.T, out string, cs []*clusterNode, fam string, client netip.Addr, nodes []netip.Addr, pods []string) {
	const port, conns = 9094, 24
	name := "both-" + fam
	for i, c := range cs {
		srv := netip.AddrPortFrom(pick(fam, c.ip4(), c.ip6()), port)
		ln := listenIn(t, c.pod, srv)
		go func(node string) {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				from := conn.RemoteAddr().(*net.TCPAddr).AddrPort()
				fmt.Fprintf(conn, "%s %s", node, from.Addr().Unmap())
				conn.Close()
			}
		}(c.name)
		args := []string{"service", "create", name, "--vip", netip.AddrPortFrom(nodes[i], 30084).String()}
		for _, p := range pods {
			args = append(args, "--backend", fmt.Sprintf("%s:%d", p, port))
		}
		c.mustXlane(nil, args...)
	}
	for i, entry := range cs {
		cluster := pick(fam, entry.pod4.Addr(), entry.pod6.Addr())
		seen := map[string]int{}
		vip := netip.AddrPortFrom(nodes[i], 30084)
		for k := 0; k < conns; k++ {
			var got []byte
			err := ns.WithNetNSPath(nsPath(out), func(ns.NetNS) error {
				conn, err := net.DialTimeout("tcp", vip.String(), 3*time.Second)
				if err != nil {
					return err
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(3 * time.Second))
				got, err = io.ReadAll(conn)
				return err
			})
			if err != nil {
				t.Fatalf("connection %d to %s (n%d): %v (answer %q)", k, vip, i+1, err, got)
			}
			backend, from, _ := strings.Cut(string(got), " ")
			want := cluster.String()
			if backend == entry.name {
				want = client.String()
			}
			if from != want {
				t.Errorf("through %s, %s's pod saw the connection from %s, want %s", entry.name, backend, from, want)
			}
			seen[backend]++
		}
		if len(seen) != len(cs) {
			t.Errorf("through %s (%s): backends that answered %v, want the pod of every node", entry.name, vip, seen)
		}
		t.Logf("through %s: %v", entry.name, seen)
	}
	for _, c := range cs {
		c.mustXlane(nil, "service", "rm", name)
	}
}

// exchangeVia moves size bytes each way over one TCP connection from a
// client in netns from, dialing dial, to a listener on listen in netns to:
// the server checks the SHA-256 of what the client sent, then sends size
// bytes of its own, whose SHA-256 the client checks. It returns the
// address the server saw the connection come from.
func exchangeVia(t *testing.T, from, to string, listen, dial netip.AddrPort, size int64) netip.AddrPort {
	t.Helper()
	ln := listenIn(t, to, listen)
	defer ln.Close()
	stream := func(seed byte) io.Reader {
		return io.LimitReader(mrand.NewChaCha8([32]byte{seed, byte(size), 0x5a}), size)
	}
	sum := func(r io.Reader) []byte {
		h := sha256.New()
		io.Copy(h, r)
		return h.Sum(nil)
	}
	wantUp, wantDown := sum(stream(1)), sum(stream(2))
	type result struct {
		peer netip.AddrPort
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		r := result{peer: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
		h := sha256.New()
		n, err := io.CopyN(h, c, size)
		switch {
		case err != nil:
			r.err = fmt.Errorf("server read %d of %d bytes: %w", n, size, err)
		case string(h.Sum(nil)) != string(wantUp):
			r.err = fmt.Errorf("server received %d bytes sha256 %x, the client sent %x", n, h.Sum(nil), wantUp)
		default:
			if _, err := io.Copy(c, stream(2)); err != nil {
				r.err = fmt.Errorf("server send: %w", err)
			}
		}
		got <- r
	}()
	var conn net.Conn
	err := ns.WithNetNSPath(nsPath(from), func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", dial.String(), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("connect %s from %s: %v", dial, from, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.Copy(conn, stream(1)); err != nil {
		t.Fatalf("client send to %s: %v", dial, err)
	}
	h := sha256.New()
	n, rerr := io.Copy(h, conn)
	r := <-got
	if r.err != nil {
		t.Fatalf("%s -> %s (listener %s): %v", from, dial, listen, r.err)
	}
	if rerr != nil || n != size || string(h.Sum(nil)) != string(wantDown) {
		t.Fatalf("%s -> %s: client received %d bytes sha256 %x (err %v), the server sent %d bytes %x", from, dial, n, h.Sum(nil), rerr, size, wantDown)
	}
	return r.peer
}
