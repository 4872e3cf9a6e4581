package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// udpEchoIn answers every datagram to addr (in netns) with the same bytes
// until the test ends.
func udpEchoIn(t *testing.T, netns string, addr netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("listen udp %s in %s: %v", addr, netns, err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
}

// udpSendto sends a datagram to dst from an unconnected socket in netns
// (sendto, as DNS clients do) and returns where the answer came from, as
// recvfrom reports it.
func udpSendto(t *testing.T, netns string, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	var c *net.UDPConn
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		c, err = net.ListenUDP("udp", nil)
		return err
	})
	if err != nil {
		t.Fatalf("udp socket in %s: %v", netns, err)
	}
	defer c.Close()
	msg := []byte(fmt.Sprintf("sendto %s %d", dst, time.Now().UnixNano()))
	buf := make([]byte, 2048)
	for try := 0; try < 3; try++ {
		if _, err := c.WriteToUDPAddrPort(msg, dst); err != nil {
			t.Fatalf("sendto %s from %s: %v", dst, netns, err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			continue
		}
		if !bytes.Equal(buf[:n], msg) {
			t.Fatalf("sendto %s from %s: answer %q, want the echo %q", dst, netns, buf[:n], msg)
		}
		return netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	}
	t.Fatalf("sendto %s from %s: no answer in 3 tries", dst, netns)
	return netip.AddrPort{}
}

//	network  subnets                         docker options
//	par      10.92.0.0/24, fd00:92::/64       --ipv6
//	routed   10.92.2.0/24                     gateway_mode_ipv4=routed
//	inter    10.92.3.0/24, fd00:92:3::/64     --internal, gateway_mode_ipv6=isolated
//
// What a Docker user sees differ between a bridge network and an xlane one
// (issue 13), one subtest per item: the node's unconnected UDP to a
// published port and to a service; -p on one host address, -p PORT and -P;
// the MAC address in docker inspect.
func TestDockerBridgeParity(t *testing.T) {
	var out string
	h := newDockerHost(t, withDockerOutside(&out))
	n := h.n
	node4, node6 := netip.MustParseAddr("10.97.0.1"), netip.MustParseAddr("fd00:97::1")
	o4 := netip.MustParseAddr("10.97.0.2")
	h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.92.0.0/24", "--ipv6", "--subnet", "fd00:92::/64", "par")

	t.Run("node sendto a published port and a service", func(t *testing.T) {
		u1 := h.run("u1", "--network", "par", "-p", "5353:53/udp", "-p", "127.0.0.1:5355:53/udp")
		a := h.attachment(u1, "par")
		nsu := h.ns(u1)
		udpEchoIn(t, nsu, netip.AddrPortFrom(a.v4(), 53))
		udpEchoIn(t, nsu, netip.AddrPortFrom(a.v6(), 53))
		// On the uplink's addresses the sendmsg hook translates; on
		// loopback xlaned's UDP relay answers (every address for 5353,
		// 127.0.0.1 alone for 5355).
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(node4, 5353), netip.AddrPortFrom(node6, 5353),
			netip.MustParseAddrPort("127.0.0.1:5353"), netip.MustParseAddrPort("[::1]:5353"), netip.MustParseAddrPort("127.0.0.1:5355")} {
			if from := udpSendto(t, n.netns, dst); from != dst {
				t.Errorf("sendto %s: the answer came from %s, want it from %s", dst, from, dst)
			}
		}
		vip4, vip6 := netip.MustParseAddrPort("10.99.0.10:53"), netip.MustParseAddrPort("[fd00:99::10]:53")
		n.mustXlane(nil, "service", "create", "dns4", "--vip", vip4.String()+"/udp", "--backend", netip.AddrPortFrom(a.v4(), 53).String())
		n.mustXlane(nil, "service", "create", "dns6", "--vip", vip6.String()+"/udp", "--backend", netip.AddrPortFrom(a.v6(), 53).String())
		for _, dst := range []netip.AddrPort{vip4, vip6} {
			if from := udpSendto(t, n.netns, dst); from != dst {
				t.Errorf("sendto %s: the answer came from %s, want it from %s", dst, from, dst)
			}
		}
		n.mustXlane(nil, "service", "rm", "dns4")
		n.mustXlane(nil, "service", "rm", "dns6")
		h.mustDocker("rm", "-f", u1)
	})

	t.Run("ports on one address, chosen ports", func(t *testing.T) {
		const size = 1 << 20
		// -p 127.0.0.1:8082:80 and [::1]:8083: the node's loopback only.
		p1 := h.run("p1", "--network", "par", "-p", "127.0.0.1:8082:80", "-p", "[::1]:8083:80")
		a1 := h.attachment(p1, "par")
		ns1 := h.ns(p1)
		transferVia(t, n.netns, ns1, netip.AddrPortFrom(a1.v4(), 80), netip.MustParseAddrPort("127.0.0.1:8082"), size)
		transferVia(t, n.netns, ns1, netip.AddrPortFrom(a1.v4(), 80), netip.MustParseAddrPort("[::1]:8083"), size)
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(node4, 8082), netip.AddrPortFrom(node6, 8083)} {
			if err := dialOnce(out, dst); err == nil {
				t.Errorf("the outside reached %s, published on the node's loopback only", dst)
			}
		}
		// -p 80 and -P (EXPOSE 81): xlane chooses the host ports, below
		// the node's ip_local_port_range, and reports them in xlane
		// endpoint inspect (Docker reads no port map from a remote
		// driver: docker port stays empty, docs/docker.md).
		p2 := h.run("p2", "--network", "par", "-p", "80", "--expose", "81", "-P")
		a2 := h.attachment(p2, "par")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", a2.EndpointID)
		var lrLo int
		fmt.Sscan(runIn(t, n.netns, "cat", "/proc/sys/net/ipv4/ip_local_port_range"), &lrLo)
		chosen := map[uint16]uint16{} // container port -> host port
		for _, pm := range ep.Ports {
			if int(pm.NodePort) >= lrLo || pm.NodePort < 1024 || pm.Proto != "tcp" {
				t.Errorf("host port %s: want tcp below the node's ip_local_port_range (from %d)", pm, lrLo)
			}
			chosen[pm.Port] = pm.NodePort
		}
		if len(chosen) != 2 || chosen[80] == 0 || chosen[81] == 0 {
			t.Fatalf("xlane endpoint inspect: ports %v, want 80 and 81 published", ep.Ports)
		}
		ns2 := h.ns(p2)
		transferVia(t, out, ns2, netip.AddrPortFrom(a2.v4(), 80), netip.AddrPortFrom(node4, chosen[80]), size)
		transferVia(t, out, ns2, netip.AddrPortFrom(a2.v6(), 81), netip.AddrPortFrom(node6, chosen[81]), size)
		transferVia(t, n.netns, ns2, netip.AddrPortFrom(a2.v4(), 81), netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), chosen[81]), size)
		if got := h.mustDocker("port", p2); got != "" {
			t.Errorf("docker port p2 = %q: Docker now reads a remote driver's port map; update docs/docker.md", got)
		}
		// host_binding_ipv4: the network's default host address for -p.
		h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.92.6.0/24",
			"-o", "com.docker.network.bridge.host_binding_ipv4=127.0.0.1", "lonet")
		p3 := h.run("p3", "--network", "lonet", "-p", "8086:80")
		a3 := h.attachment(p3, "lonet")
		transferVia(t, n.netns, h.ns(p3), netip.AddrPortFrom(a3.v4(), 80), netip.MustParseAddrPort("127.0.0.1:8086"), size)
		if err := dialOnce(out, netip.AddrPortFrom(node4, 8086)); err == nil {
			t.Errorf("the outside reached %s:8086, published on 127.0.0.1 (host_binding_ipv4)", node4)
		}
		h.mustDocker("rm", "-f", p1, p2, p3)
		h.mustDocker("network", "rm", "lonet")
		if err := dialOnce(n.netns, netip.MustParseAddrPort("127.0.0.1:8082")); err == nil {
			t.Errorf("127.0.0.1:8082 still answers after docker rm")
		}
	})

	t.Run("gateway modes", func(t *testing.T) {
		// routed: no masquerade, the outside sees the container's own
		// address (it routes the subnet back through the node).
		h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.92.2.0/24",
			"-o", "com.docker.network.bridge.gateway_mode_ipv4=routed", "routed")
		runIn(t, out, "ip", "route", "add", "10.92.2.0/24", "via", node4.String())
		r1 := h.run("r1", "--network", "routed")
		ar := h.attachment(r1, "routed")
		if src := peerSeen(t, h.ns(r1), out, netip.AddrPortFrom(o4, 9000)); src != ar.v4() {
			t.Errorf("routed: the outside saw %v, want the container's %v", src, ar.v4())
		}
		// isolated (IPv6) on an internal network: no IPv6 gateway; the
		// IPv4 one reaches the node and nothing beyond.
		h.mustDocker("network", "create", "-d", h.driver, "--internal", "--subnet", "10.92.3.0/24", "--ipv6", "--subnet", "fd00:92:3::/64",
			"-o", "com.docker.network.bridge.gateway_mode_ipv6=isolated", "inter")
		i1 := h.run("i1", "--network", "inter")
		ai := h.attachment(i1, "inter")
		if ai.Gateway != "10.92.3.1" || ai.IPv6Gateway != "" {
			t.Errorf("internal, gateway_mode_ipv6=isolated: gateways %q %q, want 10.92.3.1 and none", ai.Gateway, ai.IPv6Gateway)
		}
		nsi := h.ns(i1)
		ping(t, nsi, node4)
		noPing(t, nsi, o4)
		noPing(t, nsi, node6)
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.92.4.0/24", "-o", "com.docker.network.bridge.gateway_mode_ipv4=isolated", "iso"},
				"gateway_mode_ipv4=isolated: only for an internal network (--internal)"},
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.92.5.0/24", "--ipv6", "--subnet", "fd00:92:5::/64",
				"-o", "com.docker.network.bridge.gateway_mode_ipv4=routed", "half"},
				"xlane masquerades a network's families together"},
		} {
			if msg, err := h.docker(c.args...); err == nil || !strings.Contains(msg, c.want) {
				t.Errorf("docker %s: %v\n%s\nwant an error saying %q", strings.Join(c.args, " "), err, msg, c.want)
			}
		}
		h.mustDocker("rm", "-f", r1, i1)
		h.mustDocker("network", "rm", "routed", "inter")
	})

	t.Run("MAC address in inspect", func(t *testing.T) {
		m1 := h.run("m1", "--network", "par")
		a := h.attachment(m1, "par")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", a.EndpointID)
		link := runIn(t, h.ns(m1), "ip", "-o", "link", "show", "eth0")
		if a.MacAddress == "" || a.MacAddress != ep.MAC || !strings.Contains(link, a.MacAddress) {
			t.Errorf("docker inspect MacAddress %q, xlane's %q, the container's eth0:\n%s", a.MacAddress, ep.MAC, link)
		}
		if got := h.mustDocker("network", "inspect", "-f", `{{range .Containers}}{{.MacAddress}}{{end}}`, "par"); got != a.MacAddress {
			t.Errorf("docker network inspect par: MacAddress %q, want %q", got, a.MacAddress)
		}
		h.mustDocker("rm", "-f", m1)
	})
}
