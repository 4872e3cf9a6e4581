package wireguard

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

const (
	// Device is the node's WireGuard device.
	Device = "xlwg0"
	// DefaultPort is WireGuard's UDP port between nodes (Cilium's).
	DefaultPort = 51871
	// RouteProtocol marks the routes to peers' cluster addresses through
	// the device (`ip route show proto 121`).
	RouteProtocol = 121
	// Overhead4 and Overhead6 are what WireGuard adds to a packet over an
	// IPv4 or IPv6 underlay: outer IP, UDP (8), its header (16) and tag
	// (16).
	Overhead4 = 20 + 8 + 16 + 16
	Overhead6 = 40 + 8 + 16 + 16
	// handshakeStale is when a peer's session is no longer usable without
	// a new handshake (WireGuard's Reject-After-Time).
	handshakeStale = 180 * time.Second
	// Keepalive is every peer's persistent keepalive. Setting it sends
	// one at once (both engines), which opens a session: a restarted
	// node (the embedded engine's device is new, its sessions gone)
	// makes its handshakes at start instead of waiting for its peers to
	// give up on the old session (15 s of silence after a send: a
	// receiving pod never sends first). It also keeps the handshake age
	// in status meaningful on idle peers.
	Keepalive = 25 * time.Second
)

// Config is how xlaned runs encryption.
type Config struct {
	// Port is the UDP port WireGuard listens on (0: DefaultPort), the
	// same on every node.
	Port int
	// Engine is auto (""), kernel or embedded.
	Engine string
	// Strict (--encryption-strict): a peer without a working session
	// gets none of its pods' traffic (drop_unencrypted) rather than the
	// cleartext overlay (session.go).
	Strict bool
	// Node (--encryption-node): the node's own traffic to the peers'
	// underlay addresses goes through the device too, but for the
	// control traffic that stays clear (nodetraffic.go): WireGuard's own
	// UDP, ICMP (the peer probes), UDP to VXLANPort (the overlay's
	// cleartext fallback) and TCP to ClearTCP (the Kubernetes API server).
	Node      bool
	VXLANPort int
	ClearTCP  []netip.AddrPort
	Log       *slog.Logger
}

// Peer is another node as the tunnel knows it.
type Peer struct {
	Node      string
	PublicKey Key
	// Endpoint is the peer's underlay address and WireGuard port.
	Endpoint netip.AddrPort
	// Addrs are its cluster addresses: its allowed IPs, routed into the
	// device.
	Addrs []netip.Addr
	// Underlay are the peer's underlay addresses and SelfUnderlay this
	// node's (the source by family): with Config.Node the node's own
	// traffic to them goes into the device.
	Underlay, SelfUnderlay []netip.Addr
}

// Tunnel is the node's WireGuard device and its peers.
type Tunnel struct {
	mu    sync.Mutex
	cfg   Config
	eng   engine
	pub   Key
	link  netlink.Link
	addrs []netip.Addr
	peers map[string]Peer // by node name
	sess  map[string]*session
	// keyed is when this node's key was last replaced (RotateKey; zero
	// since Open): older handshakes are void.
	keyed time.Time
}

// Open makes (or adopts) the device with the private key, listening on
// the port, up, with MTU mtu. On failure nothing stays.
func Open(cfg Config, priv Key, mtu int) (*Tunnel, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, model.Fieldf("wireguard-port", "%d: want 1-65535", cfg.Port)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	eng, err := openEngine(cfg.Engine, Device, mtu, cfg.Log)
	if err != nil {
		return nil, err
	}
	t := &Tunnel{cfg: cfg, eng: eng, pub: priv.PublicKey(), peers: map[string]Peer{}, sess: map[string]*session{}}
	fail := func(err error) (*Tunnel, error) {
		eng.close()
		if cfg.Node {
			removeNodeTraffic()
		}
		if l, lerr := netlink.LinkByName(Device); lerr == nil {
			netlink.LinkDel(l)
		}
		return nil, err
	}
	// The port in use shows when the engine binds it: wireguard-go at
	// configuration, the kernel when the device goes up.
	portInUse := func(err error) bool {
		return errors.Is(err, unix.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
	}
	inUse := func(err error) error {
		return model.Fieldf("wireguard-port", "%d: UDP port in use on this node: %v", cfg.Port, err)
	}
	// The fwmark lets WireGuard's own packets past the node traffic's
	// table (0: none, an adopted device's cleared).
	mark := 0
	if cfg.Node {
		mark = NodeMark
	}
	err = eng.configure(wgtypes.Config{PrivateKey: &priv, ListenPort: &cfg.Port, FirewallMark: &mark})
	if err != nil {
		if portInUse(err) {
			return fail(inUse(err))
		}
		return fail(fmt.Errorf("configure %s: %w", Device, err))
	}
	if t.link, err = netlink.LinkByName(Device); err != nil {
		return fail(fmt.Errorf("find %s: %w", Device, err))
	}
	// An adopted device keeps its MTU (the node's record sets it again,
	// SetMTU): a provisional one would drop its full-size packets.
	if !eng.adopted() {
		if err := netlink.LinkSetMTU(t.link, mtu); err != nil {
			return fail(fmt.Errorf("set %s mtu %d: %w", Device, mtu, err))
		}
	}
	if err := netlink.LinkSetUp(t.link); err != nil {
		if portInUse(err) {
			return fail(inUse(err))
		}
		return fail(fmt.Errorf("set %s up: %w", Device, err))
	}
	if cfg.Node {
		err = t.setNodeRules(true)
	} else {
		err = removeNodeTraffic() // a former run's
	}
	if err != nil {
		return fail(fmt.Errorf("encryption-node: %w", err))
	}
	return t, nil
}

// Engine is the engine running the device.
func (t *Tunnel) Engine() string { return t.eng.name() }

// Addrs are the device's addresses (SetAddrs).
func (t *Tunnel) Addrs() []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.addrs)
}

// Port is the UDP port the device listens on.
func (t *Tunnel) Port() int { return t.cfg.Port }

// PublicKey is this node's public key.
func (t *Tunnel) PublicKey() Key {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pub
}

// Close lets go of the device: the embedded engine's goes away with it;
// the kernel's stays, with its keys and sessions, for the next xlaned to
// adopt (Remove deletes it).
func (t *Tunnel) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eng.close()
}

// SetMTU sets the device's MTU.
func (t *Tunnel) SetMTU(mtu int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.link.Attrs().MTU == mtu {
		return nil
	}
	if err := netlink.LinkSetMTU(t.link, mtu); err != nil {
		return fmt.Errorf("set %s mtu %d: %w", Device, mtu, err)
	}
	t.link.Attrs().MTU = mtu
	return nil
}

// SetAddrs gives the device this node's cluster addresses (nil: none).
func (t *Tunnel) SetAddrs(addrs []netip.Addr) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	have, err := netlink.AddrList(t.link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list %s addresses: %w", Device, err)
	}
	for _, h := range have {
		a, _ := netip.AddrFromSlice(h.IP)
		if a.Unmap().IsLinkLocalUnicast() || slices.Contains(addrs, a.Unmap()) {
			continue
		}
		if err := netlink.AddrDel(t.link, &h); err != nil {
			return fmt.Errorf("remove %s from %s: %w", a, Device, err)
		}
	}
	for _, a := range addrs {
		na := &netlink.Addr{IPNet: hostNet(a)}
		if a.Is6() {
			na.Flags = unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE // no /128 route in main: the pods' subnet holds the address
		}
		if err := netlink.AddrReplace(t.link, na); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, Device, err)
		}
	}
	t.addrs = slices.Clone(addrs)
	return nil
}

// SetPeer adds or updates a peer: its key, endpoint and allowed IPs on
// the device, a route into the device per cluster address. A peer whose
// key changed replaces the old one's session.
func (t *Tunnel) SetPeer(p Peer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, o := range t.peers {
		if name != p.Node && o.PublicKey == p.PublicKey {
			return model.Fieldf("wg_public_key", "%s is node %q's already", p.PublicKey, name)
		}
	}
	cfg := wgtypes.Config{}
	if old, ok := t.peers[p.Node]; ok && old.PublicKey != p.PublicKey {
		cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: old.PublicKey, Remove: true})
	}
	keepalive := Keepalive
	pc := wgtypes.PeerConfig{PublicKey: p.PublicKey, ReplaceAllowedIPs: true,
		Endpoint: net.UDPAddrFromAddrPort(p.Endpoint), PersistentKeepaliveInterval: &keepalive}
	for _, a := range p.Addrs {
		pc.AllowedIPs = append(pc.AllowedIPs, *hostNet(a))
	}
	for _, a := range t.nodeAllowed(p) {
		pc.AllowedIPs = append(pc.AllowedIPs, *hostNet(a))
	}
	cfg.Peers = append(cfg.Peers, pc)
	if err := t.eng.configure(cfg); err != nil {
		return fmt.Errorf("configure peer %s on %s: %w", p.Node, Device, err)
	}
	old, ok := t.peers[p.Node]
	if ok {
		for _, a := range old.Addrs {
			if !slices.Contains(p.Addrs, a) {
				t.delRoute(a)
			}
		}
		for _, a := range old.Underlay {
			if !slices.Contains(p.Underlay, a) {
				t.setNodeRoutes(Peer{Underlay: []netip.Addr{a}}, false)
			}
		}
	}
	if !ok || old.PublicKey != p.PublicKey || old.Endpoint != p.Endpoint {
		// A new grace, its traffic into WireGuard (the caller applies
		// it now: Encrypts).
		t.resetSession(p.Node, time.Now())
		t.sess[p.Node].course = "wg"
	}
	// Recorded before the routes: a failure below is undone by the
	// caller's RemovePeer (or SetPeer of the old record), device peer and
	// routes alike.
	t.peers[p.Node] = p
	for _, a := range p.Addrs {
		r := &netlink.Route{LinkIndex: t.link.Attrs().Index, Dst: hostNet(a), Protocol: RouteProtocol, Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s into %s: %w", a, Device, err)
		}
		if err := netlink.RouteReplace(fallbackRoute(a)); err != nil {
			return fmt.Errorf("unreachable route %s: %w", a, err)
		}
	}
	// The node's own traffic follows its pods' (Config.Node): out of
	// WireGuard only in the cleartext fallback.
	return t.setNodeRoutes(p, t.session(p.Node).course != StateCleartext)
}

// RemovePeer removes a node's peer and routes (missing: nothing to do).
func (t *Tunnel) RemovePeer(node string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.peers[node]
	if !ok {
		return nil
	}
	err := t.eng.configure(wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: p.PublicKey, Remove: true}}})
	for _, a := range p.Addrs {
		t.delRoute(a)
	}
	if nerr := t.setNodeRoutes(p, false); err == nil {
		err = nerr
	}
	delete(t.peers, node)
	delete(t.sess, node)
	if err != nil {
		return fmt.Errorf("remove peer %s from %s: %w", node, Device, err)
	}
	return nil
}

// Prune removes what no SetPeer since Open accounts for: peers an adopted
// device had, routes of protocol 121 a former run left.
func (t *Tunnel) Prune() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	dev, err := t.eng.device()
	if err != nil {
		return fmt.Errorf("read %s: %w", Device, err)
	}
	keep := map[Key]bool{}
	want, wantNode := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, p := range t.peers {
		keep[p.PublicKey] = true
		for _, a := range p.Addrs {
			want[a] = true
		}
		for _, a := range t.nodeAllowed(p) {
			wantNode[a] = true
		}
	}
	cfg := wgtypes.Config{}
	for _, p := range dev.Peers {
		if !keep[p.PublicKey] {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		}
	}
	if len(cfg.Peers) > 0 {
		errs = append(errs, t.eng.configure(cfg))
	}
	routes, err := ownRoutes()
	errs = append(errs, err)
	for _, r := range routes {
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		if !want[a.Unmap()] {
			errs = append(errs, netlink.RouteDel(&r))
		}
	}
	routes, err = nodeTableRoutes()
	errs = append(errs, err)
	for _, r := range routes {
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		if !wantNode[a.Unmap()] {
			errs = append(errs, netlink.RouteDel(&r))
		}
	}
	return errors.Join(errs...)
}

func (t *Tunnel) delRoute(a netip.Addr) {
	netlink.RouteDel(&netlink.Route{LinkIndex: t.link.Attrs().Index, Dst: hostNet(a), Protocol: RouteProtocol, Scope: netlink.SCOPE_LINK})
	netlink.RouteDel(fallbackRoute(a))
}

// fallbackRoute is a peer's cluster address unreachable, behind the route
// into the device (a higher metric): when the device is gone (the
// embedded engine's while xlaned restarts, a device deleted by hand) the
// VXLAN packets to the peer are refused rather than sent in cleartext by
// another route (the default one).
func fallbackRoute(a netip.Addr) *netlink.Route {
	return &netlink.Route{Dst: hostNet(a), Protocol: RouteProtocol, Type: unix.RTN_UNREACHABLE, Priority: fallbackMetric}
}

// fallbackMetric is the unreachable routes' (the device's have 0).
const fallbackMetric = 4242

// Status is the tunnel as `xlane status` shows it: never the private key.
func (t *Tunnel) Status() *api.EncryptionInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	info := &api.EncryptionInfo{Mode: "wireguard", Engine: t.eng.name(), Device: Device,
		PublicKey: t.pub.String(), Port: t.cfg.Port, Strict: t.cfg.Strict, Node: t.cfg.Node}
	for _, a := range t.addrs {
		info.Addresses = append(info.Addresses, a.String())
	}
	dev, err := t.eng.device()
	if err != nil {
		info.Error = err.Error()
	}
	live := map[Key]wgtypes.Peer{}
	if dev != nil {
		for _, p := range dev.Peers {
			live[p.PublicKey] = p
		}
	}
	names := make([]string, 0, len(t.peers))
	for n := range t.peers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := t.peers[n]
		// The state is the last Check's: what the datapath does now.
		s := t.session(n)
		ep := api.EncryptionPeer{Node: n, PublicKey: p.PublicKey.String(), Endpoint: p.Endpoint.String(),
			State: s.state, Reason: s.reason, Detail: reasonDetail[s.reason]}
		if l, ok := live[p.PublicKey]; ok {
			ep.RxBytes, ep.TxBytes = uint64(l.ReceiveBytes), uint64(l.TransmitBytes)
			if !l.LastHandshakeTime.IsZero() {
				hs := l.LastHandshakeTime.UTC()
				ep.LastHandshake = &hs
				ep.HandshakeAgeSeconds = int64(time.Since(hs) / time.Second)
			}
		}
		info.Peers = append(info.Peers, ep)
		if s.state == StateCleartext {
			info.Cleartext++
		}
	}
	return info
}

// Remove deletes the device and its routes (xlaned --uninstall); missing
// is not an error.
func Remove() error {
	if err := removeNodeTraffic(); err != nil {
		return err
	}
	routes, err := ownRoutes()
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.Type == unix.RTN_UNREACHABLE {
			if err := netlink.RouteDel(&r); err != nil {
				return fmt.Errorf("remove route %s: %w", r.Dst, err)
			}
		}
	}
	l, err := netlink.LinkByName(Device)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("find %s: %w", Device, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("remove %s: %w", Device, err)
	}
	return nil
}

// ownRoutes are the main table's routes of protocol RouteProtocol.
func ownRoutes() ([]netlink.Route, error) {
	return listRoutes(&netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL, Device+" routes")
}

// listRoutes lists both families' routes matching filter (mask: which
// of its fields count); what names them in an error.
func listRoutes(filter *netlink.Route, mask uint64, what string) ([]netlink.Route, error) {
	var out []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, filter, mask)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, fmt.Errorf("list %s: %w", what, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

// ClusterAddrs are a node's cluster addresses: the first address of each
// of its pod CIDRs, the device's addresses on that node.
func ClusterAddrs(podCIDRs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range podCIDRs {
		out = append(out, p.Masked().Addr())
	}
	return out
}

// TunnelAddr is the address the overlay tunnels to peer by: its cluster
// address of a family both nodes have, IPv4 first (invalid: none).
func TunnelAddr(peer, self []netip.Prefix) netip.Addr {
	for _, v4 := range []bool{true, false} {
		var pa netip.Addr
		for _, p := range peer {
			if p.Addr().Is4() == v4 {
				pa = p.Masked().Addr()
			}
		}
		if !pa.IsValid() {
			continue
		}
		if self == nil || slices.ContainsFunc(self, func(p netip.Prefix) bool { return p.Addr().Is4() == v4 }) {
			return pa
		}
	}
	return netip.Addr{}
}
