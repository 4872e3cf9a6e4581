package vm

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// sentConn records what the handler writes.
type sentConn struct {
	net.PacketConn
	b  []byte
	to net.Addr
}

func (c *sentConn) WriteTo(b []byte, to net.Addr) (int, error) {
	c.b, c.to = append([]byte(nil), b...), to
	return len(b), nil
}

// The DHCPv4 server answers the endpoint's MAC only, offers and acks the
// endpoint's lease, NAKs any other address and ignores the rest.
func TestDHCPv4Handler(t *testing.T) {
	guest := net.HardwareAddr{0x52, 0x54, 0, 0x84, 0, 1}
	other := net.HardwareAddr{0x52, 0x54, 0, 0x84, 0, 2}
	ds := &dhcpServer{mac: guest, addr: net.IPv4(10, 84, 0, 3).To4(), gw: net.IPv4(10, 84, 0, 1).To4(), mask: net.CIDRMask(24, 32)}
	lease := net.IPv4(10, 84, 0, 3)
	cases := []struct {
		name     string
		mac      net.HardwareAddr
		typ      dhcpv4.MessageType
		request  net.IP
		want     dhcpv4.MessageType // 0: no answer
		wantDest net.IP
	}{
		{"discover", guest, dhcpv4.MessageTypeDiscover, nil, dhcpv4.MessageTypeOffer, lease},
		{"request lease", guest, dhcpv4.MessageTypeRequest, lease, dhcpv4.MessageTypeAck, lease},
		{"request other", guest, dhcpv4.MessageTypeRequest, net.IPv4(10, 84, 0, 9), dhcpv4.MessageTypeNak, net.IPv4bcast},
		{"other mac", other, dhcpv4.MessageTypeDiscover, nil, 0, nil},
		{"inform", guest, dhcpv4.MessageTypeInform, nil, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mods := []dhcpv4.Modifier{dhcpv4.WithMessageType(c.typ), dhcpv4.WithHwAddr(c.mac)}
			if c.request != nil {
				mods = append(mods, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.request)))
			}
			req, err := dhcpv4.New(mods...)
			if err != nil {
				t.Fatal(err)
			}
			conn := &sentConn{}
			ds.handle(slog.Default(), conn, req)
			if c.want == 0 {
				if conn.b != nil {
					t.Fatalf("answered %v; want no answer", conn.to)
				}
				return
			}
			rep, err := dhcpv4.FromBytes(conn.b)
			if err != nil {
				t.Fatalf("reply: %v", err)
			}
			if rep.MessageType() != c.want || rep.TransactionID != req.TransactionID {
				t.Fatalf("reply %v xid %v, want %v xid %v", rep.MessageType(), rep.TransactionID, c.want, req.TransactionID)
			}
			if dst := conn.to.(*net.UDPAddr); !dst.IP.Equal(c.wantDest) || dst.Port != dhcpv4.ClientPort {
				t.Errorf("sent to %v, want %v:68", dst, c.wantDest)
			}
			if !rep.ServerIdentifier().Equal(ds.gw) {
				t.Errorf("server id %v, want the gateway", rep.ServerIdentifier())
			}
			if c.want == dhcpv4.MessageTypeNak {
				return
			}
			ones, _ := rep.SubnetMask().Size()
			if !rep.YourIPAddr.Equal(lease) || ones != 24 || len(rep.Router()) != 1 || !rep.Router()[0].Equal(ds.gw) ||
				rep.IPAddressLeaseTime(0) != dhcpLeaseTime {
				t.Errorf("lease %v/%d router %v time %v, want %v/24 router %v time %v", rep.YourIPAddr, ones, rep.Router(), rep.IPAddressLeaseTime(0), lease, ds.gw, time.Duration(dhcpLeaseTime))
			}
		})
	}
	if ds.acked.Load() != 1 || ds.nak.Load() != 1 || ds.ignored.Load() != 2 {
		t.Errorf("counted %d acked, %d nak, %d ignored; want 1, 1, 2", ds.acked.Load(), ds.nak.Load(), ds.ignored.Load())
	}
}
