package wireguard

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/tuntest"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func newTestDevice(t *testing.T, bind conn.Bind) (*embeddedEngine, *tuntest.ChannelTUN) {
	t.Helper()
	tt := tuntest.NewChannelTUN()
	wg := device.NewDevice(tt.TUN(), bind, device.NewLogger(device.LogLevelSilent, ""))
	t.Cleanup(wg.Close)
	return &embeddedEngine{dev: "test", wg: wg}, tt
}

func mustKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ipnet(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

// TestEmbeddedConfigure: a wgtypes.Config (what the kernel engine hands
// wgctrl) written as UAPI reaches wireguard-go's device, and the device
// read back through UAPI is the same configuration; peers are updated,
// their allowed IPs replaced, removed.
func TestEmbeddedConfigure(t *testing.T) {
	binds := bindtest.NewChannelBinds()
	e, _ := newTestDevice(t, binds[0])
	priv, p1, p2 := mustKey(t), mustKey(t).PublicKey(), mustKey(t).PublicKey()
	port := 1
	keep := 25 * time.Second
	err := e.configure(wgtypes.Config{PrivateKey: &priv, ListenPort: &port, ReplacePeers: true, Peers: []wgtypes.PeerConfig{
		{PublicKey: p1, Endpoint: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}, ReplaceAllowedIPs: true,
			AllowedIPs: []net.IPNet{ipnet("10.244.2.0/32"), ipnet("fd00:244:0:2::/128")}, PersistentKeepaliveInterval: &keep},
		{PublicKey: p2, AllowedIPs: []net.IPNet{ipnet("10.244.3.0/32")}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.device()
	if err != nil {
		t.Fatal(err)
	}
	// (The in-memory bind picks its own port: not compared.)
	if d.PrivateKey != priv || d.PublicKey != priv.PublicKey() || d.ListenPort == 0 || len(d.Peers) != 2 {
		t.Fatalf("device %+v: want the key, a port, 2 peers", d)
	}
	peer := func(d *wgtypes.Device, k wgtypes.Key) *wgtypes.Peer {
		for i := range d.Peers {
			if d.Peers[i].PublicKey == k {
				return &d.Peers[i]
			}
		}
		return nil
	}
	got := peer(d, p1)
	if got == nil || got.Endpoint.String() != "127.0.0.1:2" || got.PersistentKeepaliveInterval != keep || len(got.AllowedIPs) != 2 ||
		got.AllowedIPs[0].String() != "10.244.2.0/32" || got.AllowedIPs[1].String() != "fd00:244:0:2::/128" || !got.LastHandshakeTime.IsZero() {
		t.Fatalf("peer 1 %+v", got)
	}
	err = e.configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: p1, UpdateOnly: true, ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{ipnet("10.244.9.0/32")}},
		{PublicKey: p2, Remove: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err = e.device(); err != nil {
		t.Fatal(err)
	}
	if got := peer(d, p1); len(d.Peers) != 1 || got == nil || len(got.AllowedIPs) != 1 || got.AllowedIPs[0].String() != "10.244.9.0/32" {
		t.Fatalf("after update and remove: %+v", d.Peers)
	}
}

// TestEmbeddedHandshake: two embedded devices joined by an in-memory
// bind pass a packet; each one's status reads a handshake and bytes.
func TestEmbeddedHandshake(t *testing.T) {
	binds := bindtest.NewChannelBinds()
	a, ta := newTestDevice(t, binds[0])
	b, tb := newTestDevice(t, binds[1])
	ka, kb := mustKey(t), mustKey(t)
	aAddr, bAddr := netip.MustParseAddr("10.244.1.0"), netip.MustParseAddr("10.244.2.0")
	pa, pb := 1, 2
	for _, s := range []struct {
		e          *embeddedEngine
		priv, peer wgtypes.Key
		port, to   int
		allowed    netip.Addr
	}{{a, ka, kb.PublicKey(), pa, pa, bAddr}, {b, kb, ka.PublicKey(), pb, pb, aAddr}} { // (bindtest: a bind sends to its own index)
		err := s.e.configure(wgtypes.Config{PrivateKey: &s.priv, ListenPort: &s.port, Peers: []wgtypes.PeerConfig{{
			PublicKey: s.peer, Endpoint: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: s.to},
			AllowedIPs: []net.IPNet{*hostNet(s.allowed)}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	ping := tuntest.Ping(bAddr, aAddr)
	ta.Outbound <- ping
	select {
	case got := <-tb.Inbound:
		if !slices.Equal(got, ping) {
			t.Fatalf("b received %x, want %x", got, ping)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no packet through the tunnel in 5 s")
	}
	for name, e := range map[string]*embeddedEngine{"a": a, "b": b} {
		d, err := e.device()
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Peers) != 1 || d.Peers[0].LastHandshakeTime.IsZero() || d.Peers[0].ReceiveBytes == 0 || d.Peers[0].TransmitBytes == 0 {
			t.Errorf("%s: peers %+v, want one with a handshake and bytes both ways", name, d.Peers)
		}
	}
}

func TestParsePublicKey(t *testing.T) {
	good := mustKey(t).PublicKey().String()
	for _, tc := range []struct {
		in string
		ok bool
	}{{good, true}, {"", false}, {"nope", false}, {"AAAA", false}, {"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", false}, {good[:40], false}} {
		_, err := ParsePublicKey("wg_public_key", tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParsePublicKey(%q): %v, want ok %v", tc.in, err, tc.ok)
		}
		if err != nil && !containsField(err.Error(), "wg_public_key") {
			t.Errorf("ParsePublicKey(%q): %v, want the field named", tc.in, err)
		}
	}
}

func containsField(s, f string) bool { return len(s) >= len(f) && s[:len(f)] == f }

func TestTunnelAddr(t *testing.T) {
	p := netip.MustParsePrefix
	both := []netip.Prefix{p("10.244.2.0/24"), p("fd00:244:0:2::/64")}
	for _, tc := range []struct {
		peer, self []netip.Prefix
		want       string
	}{
		{both, []netip.Prefix{p("10.244.1.0/24"), p("fd00:244:0:1::/64")}, "10.244.2.0"},
		{both, []netip.Prefix{p("fd00:244:0:1::/64")}, "fd00:244:0:2::"},
		{both, nil, "10.244.2.0"},
		{[]netip.Prefix{p("fd00:244:0:2::/64")}, []netip.Prefix{p("10.244.1.0/24")}, "invalid IP"},
	} {
		if got := TunnelAddr(tc.peer, tc.self).String(); got != tc.want {
			t.Errorf("TunnelAddr(%v, %v) = %s, want %s", tc.peer, tc.self, got, tc.want)
		}
	}
}
