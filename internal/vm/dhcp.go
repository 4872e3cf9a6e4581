package vm

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"

	"github.com/xlane-dev/xlane/internal/model"
)

// Address servers for VM endpoints (IPv6: dhcp6.go). A DHCPv4 server per
// VM endpoint, listening on its tap only (a UDP socket
// bound to the device), that hands the guest the endpoint's IPAM lease: its
// address with the subnet's mask, the gateway as router and server
// identifier. It answers only the guest's own MAC (the one anti-spoofing
// lets through) and only DISCOVER, REQUEST (with NAK for any other address)
// and RELEASE/DECLINE (logged); everything else is ignored and counted in
// `endpoint inspect`'s note. xlane's networks carry no DNS servers, so the
// reply has no DNS option. Containers are configured from outside and get
// no server: packets to port 67 on their veths go to Linux, where nothing
// listens.

// dhcpLeaseTime is long: the address is the endpoint's for its whole life,
// renewals only confirm it.
const dhcpLeaseTime = 24 * time.Hour

type dhcpServers struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]*dhcpServer // by endpoint ID
}

type dhcpServer struct {
	srv                 *server4.Server // nil without an IPv4 address
	v6                  *v6Server       // nil without an IPv6 address
	mac                 net.HardwareAddr
	addr, gw            net.IP
	mask                net.IPMask
	acked, nak, ignored atomic.Uint64
}

// start runs the endpoint's servers unless they run: DHCPv4 for its IPv4
// address, router advertisements and DHCPv6 for its IPv6 one (dhcp6.go).
func (s *dhcpServers) start(e *model.Endpoint, n *model.Network) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[e.ID] != nil {
		return nil
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	log := s.log.With("endpoint", e.ID, "tap", e.HostIf)
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return fmt.Errorf("endpoint %s mac %q: %w", e.ID, e.MAC, err)
	}
	ds := &dhcpServer{mac: mac}
	for _, a := range e.IPs {
		if a.Is4() {
			if p, gw, ok := n.Subnet4(); ok {
				ds.addr, ds.gw, ds.mask = a.AsSlice(), gw.AsSlice(), net.CIDRMask(p.Bits(), 32)
			}
			continue
		}
		hostMAC, err := net.ParseMAC(e.HostMAC)
		if err != nil {
			return fmt.Errorf("endpoint %s host mac %q: %w", e.ID, e.HostMAC, err)
		}
		if ds.v6, err = startV6(log, e.HostIf, hostMAC, n.MTU, a); err != nil {
			return err
		}
	}
	if ds.addr != nil {
		ds.srv, err = server4.NewServer(e.HostIf, nil, func(conn net.PacketConn, peer net.Addr, m *dhcpv4.DHCPv4) {
			ds.handle(log, conn, m)
		})
		if err != nil {
			ds.close()
			return fmt.Errorf("dhcp server on %s: %w", e.HostIf, err)
		}
		go ds.srv.Serve()
	}
	if s.m == nil {
		s.m = map[string]*dhcpServer{}
	}
	s.m[e.ID] = ds
	return nil
}

func (ds *dhcpServer) close() {
	if ds.srv != nil {
		ds.srv.Close()
	}
	if ds.v6 != nil {
		ds.v6.close()
	}
}

func (s *dhcpServers) stop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ds := s.m[id]; ds != nil {
		ds.close()
		delete(s.m, id)
	}
}

func (s *dhcpServers) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ds := range s.m {
		ds.close()
		delete(s.m, id)
	}
}

// notes say what the endpoint's servers did, for endpoint inspect.
func (s *dhcpServers) notes(id string) []string {
	s.mu.Lock()
	ds := s.m[id]
	s.mu.Unlock()
	if ds == nil {
		return []string{"dhcp: no server running (xlaned could not start it: see its log)"}
	}
	var out []string
	if ds.srv != nil {
		out = append(out, fmt.Sprintf("dhcp: serving %s/%d router %s to %s: %d acked, %d refused (nak), %d ignored (other client MAC or message type)",
			ds.addr, maskBits(ds.mask), ds.gw, ds.mac, ds.acked.Load(), ds.nak.Load(), ds.ignored.Load()))
	}
	if ds.v6 != nil {
		out = append(out, ds.v6.note())
	}
	return out
}

func maskBits(m net.IPMask) int { b, _ := m.Size(); return b }

func (ds *dhcpServer) handle(log *slog.Logger, conn net.PacketConn, m *dhcpv4.DHCPv4) {
	if m.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(m.ClientHWAddr, ds.mac) {
		ds.ignored.Add(1)
		log.Debug("dhcp: ignored", "client_mac", m.ClientHWAddr, "op", m.OpCode)
		return
	}
	var typ dhcpv4.MessageType
	switch m.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		want := m.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = m.ClientIPAddr
		}
		typ = dhcpv4.MessageTypeAck
		if !want.Equal(ds.addr) {
			typ = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeDecline:
		log.Info("dhcp: guest gave up its address", "message", m.MessageType())
		return
	default:
		ds.ignored.Add(1)
		return
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithServerIP(ds.gw),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(ds.gw)),
	}
	if typ != dhcpv4.MessageTypeNak {
		mods = append(mods,
			dhcpv4.WithYourIP(ds.addr),
			dhcpv4.WithNetmask(ds.mask),
			dhcpv4.WithRouter(ds.gw),
			dhcpv4.WithLeaseTime(uint32(dhcpLeaseTime/time.Second)),
		)
	}
	reply, err := dhcpv4.NewReplyFromRequest(m, mods...)
	if err != nil {
		log.Warn("dhcp: build reply", "err", err)
		return
	}
	// The endpoint's address has a host route and a permanent neighbour
	// entry on the tap (netconf.ConfigureHost), so a unicast reply reaches
	// a guest that has no address yet; clients that ask for broadcast get
	// one (the socket is bound to the tap).
	dst := &net.UDPAddr{IP: ds.addr, Port: dhcpv4.ClientPort}
	if typ == dhcpv4.MessageTypeNak || m.IsBroadcast() {
		dst.IP = net.IPv4bcast
	}
	if _, err := conn.WriteTo(reply.ToBytes(), dst); err != nil {
		log.Warn("dhcp: send reply", "err", err, "to", dst)
		return
	}
	if typ == dhcpv4.MessageTypeNak {
		ds.nak.Add(1)
	} else if typ == dhcpv4.MessageTypeAck {
		ds.acked.Add(1)
	}
	log.Debug("dhcp: answered", "type", typ, "to", dst)
}
