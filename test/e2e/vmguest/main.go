// Command vmguest is what the VM endpoint test (test/e2e/vm_test.go) runs
// inside its QEMU guest: it asks for an address by DHCP on the guest's NIC
// as a VM must (nobody configures it from outside), applies the lease,
// pings the container (and containers of other networks), moves
// SHA-256-checked data both ways over TCP with it (through a service VIP), then sends UDP from an address the endpoint does not own, which
// xlane's anti-spoofing must drop. With -queues it first turns on that
// many queue pairs of its multi-queue virtio-net (ethtool -L, as a user
// would: one vCPU enables one by default), opens -flows TCP connections to
// an echo server (flows spread over the queues by hash) and reports each
// queue's packets from the driver's counters. It prints what it saw, one
// "key: value" line each, for the test to check.
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func main() {
	peer := flag.String("peer", "", "the container's address")
	tcpAddr := flag.String("tcp", "", "ADDR:PORT to move data with over TCP (the container's, or a service VIP's)")
	also := flag.String("ping", "", "more addresses to ping, comma-separated (other networks)")
	udpPort := flag.Int("udp", 0, "the container's UDP port (spoofed packets)")
	spoof := flag.String("spoof", "", "an address the guest does not own")
	size := flag.Int64("size", 1<<20, "bytes to send over TCP")
	peer6 := flag.String("peer6", "", "the container's IPv6 address: get one by DHCPv6 and ping it")
	queues := flag.Int("queues", 1, "queue pairs to enable on the NIC (ethtool -L combined) and report")
	echo := flag.String("echo", "", "ADDR:PORT of a TCP echo server for -flows")
	flows := flag.Int("flows", 0, "TCP connections to -echo, 4 KiB echoed on each")
	flag.Parse()
	if err := run(*peer, *tcpAddr, *udpPort, *spoof, *size, *peer6, *also, *queues, *echo, *flows); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func run(peer, tcpAddr string, udpPort int, spoof string, size int64, peer6, also string, queues int, echo string, flows int) error {
	link, err := nic()
	if err != nil {
		return err
	}
	if queues > 1 {
		if out, err := exec.Command("ethtool", "-L", link.Attrs().Name, "combined", fmt.Sprint(queues)).CombinedOutput(); err != nil {
			return fmt.Errorf("ethtool -L %s combined %d: %v\n%s", link.Attrs().Name, queues, err, out)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", link.Attrs().Name, err)
	}
	start := time.Now()
	c, err := nclient4.New(link.Attrs().Name, nclient4.WithTimeout(3*time.Second), nclient4.WithRetry(5))
	if err != nil {
		return fmt.Errorf("dhcp client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Request(ctx)
	c.Close()
	if err != nil {
		return fmt.Errorf("dhcp: %w", err)
	}
	ack := lease.ACK
	ones, _ := ack.SubnetMask().Size()
	var router net.IP
	if r := ack.Router(); len(r) > 0 {
		router = r[0]
	}
	fmt.Printf("dhcp: %s/%d router %s server %s in %v\n", ack.YourIPAddr, ones, router, ack.ServerIdentifier(), time.Since(start).Round(time.Millisecond))
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: ack.SubnetMask()}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add %s: %w", addr, err)
	}
	if router != nil {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: router}); err != nil {
			return fmt.Errorf("default route via %s: %w", router, err)
		}
	}

	for _, a := range append([]string{peer}, strings.FieldsFunc(also, func(r rune) bool { return r == ',' })...) {
		out, err := exec.Command("ping", "-c", "3", "-i", "0.2", "-W", "5", a).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ping %s: %v\n%s", a, err, out)
		}
		fmt.Printf("ping %s: ok\n", a)
	}
	if peer6 != "" {
		if err := v6(link, peer6); err != nil {
			return err
		}
	}

	if flows > 0 {
		if err := echoFlows(echo, flows); err != nil {
			return err
		}
		fmt.Printf("flows: %d ok\n", flows)
	}
	if queues > 1 {
		if err := queueStats(link.Attrs().Name); err != nil {
			return err
		}
	}
	if tcpAddr != "" {
		if err := transfer(tcpAddr, size); err != nil {
			return err
		}
	}
	if spoof != "" {
		return spoofUDP(link, spoof, peer, udpPort)
	}
	return nil
}

// transfer moves size random bytes to tcpAddr and what comes back, and
// prints both digests.
func transfer(tcpAddr string, size int64) error {
	conn, err := net.DialTimeout("tcp", tcpAddr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	sent := sha256.New()
	recv := sha256.New()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(recv, conn)
		done <- err
	}()
	if _, err := io.Copy(conn, io.TeeReader(io.LimitReader(rand.Reader, size), sent)); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	conn.(*net.TCPConn).CloseWrite()
	if err := <-done; err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	conn.Close()
	fmt.Printf("tcp: sent %x received %x\n", sent.Sum(nil), recv.Sum(nil))
	return nil
}

// spoofUDP sends 10 datagrams to peer:udpPort from spoof, an address the
// endpoint does not own, on the same NIC.
func spoofUDP(link netlink.Link, spoof, peer string, udpPort int) error {
	sp := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(spoof), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(link, sp); err != nil {
		return fmt.Errorf("add %s: %w", spoof, err)
	}
	u, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(spoof)}, &net.UDPAddr{IP: net.ParseIP(peer), Port: udpPort})
	if err != nil {
		return fmt.Errorf("udp from %s: %w", spoof, err)
	}
	n := 0
	for i := 0; i < 10; i++ {
		if _, err := u.Write([]byte("spoofed")); err == nil {
			n++
		}
		time.Sleep(20 * time.Millisecond)
	}
	u.Close()
	fmt.Printf("spoofed: %d\n", n)
	return nil
}

// v6 gets the guest's IPv6 address by DHCPv6, waits for the default route
// a router advertisement gives, and pings peer.
func v6(link netlink.Link, peer string) error {
	start := time.Now()
	if err := waitFor(10*time.Second, func() bool {
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V6)
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("no usable link-local address: %w", err)
	}
	c, err := nclient6.New(link.Attrs().Name, nclient6.WithTimeout(3*time.Second), nclient6.WithRetry(5))
	if err != nil {
		return fmt.Errorf("dhcpv6 client: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adv, err := c.Solicit(ctx)
	if err != nil {
		return fmt.Errorf("dhcpv6 solicit: %w", err)
	}
	rep, err := c.Request(ctx, adv)
	if err != nil {
		return fmt.Errorf("dhcpv6 request: %w", err)
	}
	ia := rep.Options.OneIANA()
	if ia == nil || ia.Options.OneAddress() == nil {
		return fmt.Errorf("dhcpv6 reply without an address: %s", rep.Summary())
	}
	a := ia.Options.OneAddress().IPv6Addr
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a, Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add %s: %w", a, err)
	}
	var router net.IP
	if err := waitFor(15*time.Second, func() bool {
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V6)
		for _, r := range routes {
			if r.Dst == nil || r.Dst.IP.IsUnspecified() {
				router = r.Gw
				return r.Gw != nil
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("no default route from a router advertisement: %w", err)
	}
	fmt.Printf("dhcp6: %s router %s in %v\n", a, router, time.Since(start).Round(time.Millisecond))
	out, err := exec.Command("ping", "-6", "-c", "3", "-i", "0.2", "-W", "5", peer).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s: %v\n%s", peer, err, out)
	}
	fmt.Println("ping6: ok")
	return nil
}

func waitFor(d time.Duration, ok func() bool) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return nil
		}
	}
	return fmt.Errorf("not within %v", d)
}

// nic is the guest's one Ethernet device (virtio-net).
func nic() (netlink.Link, error) {
	for i := 0; i < 50; i++ {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, err
		}
		for _, l := range links {
			if l.Type() == "device" && len(l.Attrs().HardwareAddr) == 6 {
				return l, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("no network device in the guest")
}

// echoFlows opens n connections to addr one after the other, each sending
// 4 KiB and reading them back.
func echoFlows(addr string, n int) error {
	msg := make([]byte, 4096)
	rand.Read(msg)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("flow %d: dial %s: %w", i, addr, err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return fmt.Errorf("flow %d: write: %w", i, err)
		}
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != string(msg) {
			return fmt.Errorf("flow %d: echo: %d bytes back, %v", i, len(got), err)
		}
	}
	return nil
}

// queueRE matches virtio-net's per-queue counters in ethtool -S:
// rx_queue_0_packets (older kernels), rx0_packets, tx0_kicks (6.12 has
// moved the packet counts to netlink queue stats and keeps the kicks).
var queueRE = regexp.MustCompile(`^\s*(rx|tx)_?(?:queue_)?(\d+)_(packets|kicks):\s*(\d+)$`)

// irqRE matches a virtio queue's interrupt line in /proc/interrupts: one
// MSI-X vector per queue (virtio1-input.0, virtio1-output.1).
var irqRE = regexp.MustCompile(`^\s*\d+:((?:\s+\d+)+)\s.*virtio\d+-(input|output)\.(\d+)$`)

// queueStats prints "queue N: rx R tx T (how)" for each queue of dev:
// packets where the driver counts them per queue, else the receive
// queue's interrupts and the transmit queue's kicks (each non-zero only
// if the queue carried packets).
func queueStats(dev string) error {
	out, err := exec.Command("ethtool", "-S", dev).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ethtool -S %s: %v\n%s", dev, err, out)
	}
	type key struct{ dir, q, what string }
	got := map[key]uint64{}
	queues := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := queueRE.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseUint(m[4], 10, 64)
			got[key{m[1], m[2], m[3]}] = v
			queues[m[2]] = true
		}
	}
	irqs, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(irqs), "\n") {
		if m := irqRE.FindStringSubmatch(l); m != nil && m[2] == "input" {
			var sum uint64
			for _, f := range strings.Fields(m[1]) {
				v, _ := strconv.ParseUint(f, 10, 64)
				sum += v
			}
			got[key{"rx", m[3], "interrupts"}] += sum
		}
	}
	if len(queues) == 0 {
		return fmt.Errorf("ethtool -S %s: no per-queue counters in\n%s", dev, out)
	}
	for q := 0; queues[strconv.Itoa(q)]; q++ {
		qs := strconv.Itoa(q)
		rx, rxHow := got[key{"rx", qs, "packets"}], "packets"
		if _, ok := got[key{"rx", qs, "packets"}]; !ok {
			rx, rxHow = got[key{"rx", qs, "interrupts"}], "interrupts"
		}
		tx, txHow := got[key{"tx", qs, "packets"}], "packets"
		if _, ok := got[key{"tx", qs, "packets"}]; !ok {
			tx, txHow = got[key{"tx", qs, "kicks"}], "kicks"
		}
		fmt.Printf("queue %d: rx %d tx %d (rx %s, tx %s)\n", q, rx, tx, rxHow, txHow)
	}
	return nil
}
