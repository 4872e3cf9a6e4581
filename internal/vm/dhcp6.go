package vm

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/server6"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"

	"github.com/xlane-dev/xlane/internal/netconf"
)

// IPv6 for a VM endpoint: router advertisements from fe80::1 (the address
// every endpoint's host device carries) with the Managed flag and no
// prefix, so the guest takes fe80::1 as its default router and asks
// DHCPv6 for its address instead of making one up (SLAAC would give it an
// address anti-spoofing drops); and a DHCPv6 server on the tap that leases
// the endpoint's IPv6 address (IA_NA) to whoever asks on that tap: only
// the guest can reach it there. All of the node's networks route, none is
// on-link, so the guest sends everything to the router, as containers do.

// raInterval is how often an unsolicited advertisement goes out; a guest's
// router solicitation is answered at once.
const raInterval = 10 * time.Second

type v6Server struct {
	addr          net.IP
	dhcp          *server6.Server
	ra            *ndp.Conn
	replied, sent atomic.Uint64 // DHCPv6 replies, router advertisements
	ignored       atomic.Uint64
}

func startV6(log *slog.Logger, ifname string, hostMAC net.HardwareAddr, mtu int, addr netip.Addr) (*v6Server, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", ifname, err)
	}
	s := &v6Server{addr: addr.AsSlice()}
	duid := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: hostMAC}
	s.dhcp, err = server6.NewServer(ifname, nil, func(conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6) {
		s.handleDHCP(log, conn, peer, m, duid)
	})
	if err != nil {
		return nil, fmt.Errorf("dhcpv6 server on %s: %w", ifname, err)
	}
	go s.dhcp.Serve()
	// Not bound to fe80::1: a raw socket bound to a unicast address
	// would not see solicitations sent to ff02::2. It takes router
	// solicitations only, of this tap only.
	s.ra, _, err = ndp.Listen(ifi, ndp.Unspecified)
	if err == nil {
		err = s.ra.JoinGroup(netip.MustParseAddr("ff02::2"))
	}
	if err == nil {
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeRouterSolicitation)
		err = s.ra.SetICMPFilter(&f)
	}
	if err == nil {
		err = s.ra.SetControlMessage(ipv6.FlagInterface, true)
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("router advertisements on %s: %w", ifname, err)
	}
	ra := &ndp.RouterAdvertisement{
		CurrentHopLimit:      64,
		ManagedConfiguration: true,
		RouterLifetime:       30 * time.Minute,
		Options: []ndp.Option{
			&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: hostMAC},
			ndp.NewMTU(uint32(mtu)),
		},
	}
	cm := &ipv6.ControlMessage{HopLimit: ndp.HopLimit, Src: netconf.GatewayV6.AsSlice(), IfIndex: ifi.Index}
	go s.advertise(ifi.Index, ra, cm)
	return s, nil
}

// advertise sends an advertisement at once, on every solicitation on the
// tap and every raInterval, until the conn is closed. Sends fail while
// QEMU has not opened the tap; that is expected and not logged.
func (s *v6Server) advertise(ifindex int, ra *ndp.RouterAdvertisement, cm *ipv6.ControlMessage) {
	send := func() {
		if s.ra.WriteTo(ra, cm, netip.IPv6LinkLocalAllNodes()) == nil {
			s.sent.Add(1)
		}
	}
	send()
	next := time.Now().Add(raInterval)
	for {
		s.ra.SetReadDeadline(next)
		m, rcm, _, err := s.ra.ReadFrom()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			send()
			next = time.Now().Add(raInterval)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // a malformed message
		}
		if _, ok := m.(*ndp.RouterSolicitation); ok && rcm != nil && rcm.IfIndex == ifindex {
			send()
		}
	}
}

func (s *v6Server) handleDHCP(log *slog.Logger, conn net.PacketConn, peer net.Addr, m dhcpv6.DHCPv6, duid dhcpv6.DUID) {
	msg, err := m.GetInnerMessage()
	if err != nil {
		s.ignored.Add(1)
		return
	}
	ia := msg.Options.OneIANA()
	if ia == nil {
		s.ignored.Add(1)
		return
	}
	lease := &dhcpv6.OptIANA{IaId: ia.IaId, T1: dhcpLeaseTime / 2, T2: dhcpLeaseTime * 4 / 5}
	lease.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: s.addr, PreferredLifetime: dhcpLeaseTime, ValidLifetime: dhcpLeaseTime})
	mods := []dhcpv6.Modifier{dhcpv6.WithServerID(duid), dhcpv6.WithOption(lease)}
	var reply *dhcpv6.Message
	switch msg.Type() {
	case dhcpv6.MessageTypeSolicit:
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
		} else {
			reply, err = dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind, dhcpv6.MessageTypeConfirm:
		reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
	default:
		s.ignored.Add(1)
		return
	}
	if err != nil {
		log.Warn("dhcpv6: build reply", "err", err)
		return
	}
	if _, err := conn.WriteTo(reply.ToBytes(), peer); err != nil {
		log.Warn("dhcpv6: send reply", "err", err, "to", peer)
		return
	}
	if reply.Type() == dhcpv6.MessageTypeReply {
		s.replied.Add(1)
	}
}

func (s *v6Server) close() {
	if s.dhcp != nil {
		s.dhcp.Close()
	}
	if s.ra != nil {
		s.ra.Close()
	}
}

func (s *v6Server) note() string {
	return fmt.Sprintf("dhcpv6: serving %s: %d replies, %d ignored; %d router advertisements (managed, router fe80::1)",
		s.addr, s.replied.Load(), s.ignored.Load(), s.sent.Load())
}
