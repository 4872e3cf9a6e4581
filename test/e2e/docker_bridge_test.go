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

//	network  subnets                      docker options
//	par      10.92.0.0/24, fd00:92::/64    --ipv6
//
// What a Docker user sees differ between a bridge network and an xlane one
// (issue 13), one subtest per item: the node's unconnected UDP to a
// published port and to a service; the MAC address in docker inspect.
func TestDockerBridgeParity(t *testing.T) {
	var out string
	h := newDockerHost(t, withDockerOutside(&out))
	n := h.n
	node4, node6 := netip.MustParseAddr("10.97.0.1"), netip.MustParseAddr("fd00:97::1")
	h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.92.0.0/24", "--ipv6", "--subnet", "fd00:92::/64", "par")

	t.Run("node sendto a published port and a service", func(t *testing.T) {
		u1 := h.run("u1", "--network", "par", "-p", "5353:53/udp")
		a := h.attachment(u1, "par")
		nsu := h.ns(u1)
		udpEchoIn(t, nsu, netip.AddrPortFrom(a.v4(), 53))
		udpEchoIn(t, nsu, netip.AddrPortFrom(a.v6(), 53))
		for _, dst := range []netip.AddrPort{netip.AddrPortFrom(node4, 5353), netip.AddrPortFrom(node6, 5353)} {
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
