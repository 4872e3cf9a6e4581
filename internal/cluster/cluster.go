package cluster

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/wireguard"
)

// DefaultVXLANPort is the overlay's UDP port (IANA's VXLAN port).
const DefaultVXLANPort = 4789

// Config is the cluster's part of xlaned's flags.
type Config struct {
	// NodeName makes this daemon a node of a cluster: its record among
	// the nodes is the one of this name ("": the daemon runs alone).
	NodeName string
	// ClusterCIDRs are the cluster's pod prefixes (every node's pod CIDR
	// lies inside one); Routing is vxlan ("") or native; VXLANPort the
	// overlay's UDP port (0: 4789); OverlayEncap how this node tunnels
	// (bpf, device, auto: ""); NodesFile a file of node records,
	// watched.
	ClusterCIDRs []string
	Routing      string
	VXLANPort    int
	OverlayEncap string
	NodesFile    string
	// PeerProbeInterval is how often each peer's underlay address is
	// probed (peerprobe.go; 0: never, peers are never marked down).
	PeerProbeInterval time.Duration
	// Encryption is "" (none) or wireguard: the traffic between nodes
	// encrypted (encryption.go); WireGuardPort is its UDP port (0:
	// 51871), WireGuardEngine auto (""), kernel or embedded.
	Encryption      string
	WireGuardPort   int
	WireGuardEngine string
	// EncryptionStrict (--encryption-strict): a peer without a working
	// WireGuard session gets none of the pods' traffic
	// (drop_unencrypted) rather than the cleartext overlay.
	EncryptionStrict bool
	// EncryptionNode (--encryption-node): the node's own traffic to the
	// peers' underlay addresses through WireGuard too, but for the
	// control traffic that stays clear (internal/wireguard
	// nodetraffic.go); EncryptionClearTCP are TCP destinations left
	// clear besides (the Kubernetes API server).
	EncryptionNode     bool
	EncryptionClearTCP []netip.AddrPort
	// Uplink is the node's uplink device (native routing attaches the tc
	// program to an underlay device that is not it).
	Uplink string
}

// Cluster is this node's view of the cluster (--node-name, --cluster-cidr,
// --routing): the nodes, their prefixes and routes, the overlay, the
// peers' liveness. A daemon that runs alone has one too, not joined
// (Joined): its node API refuses changes, its listings read the store.
type Cluster struct {
	c       core.Core
	cfg     Config
	joined  bool
	name    string
	cidrs   []netip.Prefix
	routing model.Routing
	port    int
	// encap is how this node tunnels (vxlan routing): bpf or device.
	encap model.Encap
	// overlayIfindex is the VXLAN device (vxlan routing), mtu the
	// containers' default MTU (the underlay's, less VXLAN's overhead).
	overlayIfindex int
	mtu            int
	peers          peerHealth // the peers' liveness (peerprobe.go)
	// encrypt: xlaned --encryption wireguard; wg the WireGuard device
	// (encryption.go), nil until setup or without encryption.
	encrypt bool
	wg      *wireguard.Tunnel
	// keys carries this node's new public keys (RotateKey) to Kubernetes
	// mode, which publishes them (the latest only).
	keys chan string
}

// Joined says whether this node is a node of a cluster (--node-name).
func (c *Cluster) Joined() bool { return c.joined }

// CIDRs are the cluster CIDRs, nil alone.
func (c *Cluster) CIDRs() []netip.Prefix { return c.cidrs }

// OverlayPort is the VXLAN port; false alone.
func (c *Cluster) OverlayPort() (uint16, bool) { return uint16(c.port), c.joined }

// inCluster says whether any of subnets lies in a cluster CIDR: such a
// network's traffic crosses nodes (and takes the overlay's MTU); others
// (a calibration's, a node-local one) stay on the node. False alone.
func (c *Cluster) inCluster(subnets []netip.Prefix) bool {
	for _, s := range subnets {
		for _, cc := range c.cidrs {
			if cc.Overlaps(s) {
				return true
			}
		}
	}
	return false
}

// New reads the cluster flags: a cluster not joined without --node-name.
// cr is the core the cluster works through (the daemon's, not used before
// Start).
func New(cr core.Core, cfg Config) (*Cluster, error) {
	if cfg.NodeName == "" {
		if err := parseEncryption(cfg, nil); err != nil {
			return nil, err
		}
		if len(cfg.ClusterCIDRs) > 0 || cfg.Routing != "" || cfg.NodesFile != "" || cfg.OverlayEncap != "" {
			return nil, model.Fieldf("node-name", "missing: --cluster-cidr, --routing, --overlay-encap and --nodes need --node-name")
		}
		return &Cluster{c: cr, cfg: cfg}, nil
	}
	if !core.NameRE.MatchString(cfg.NodeName) {
		return nil, model.Fieldf("node-name", "%q: must be 1-64 letters, digits, '_', '.' or '-'", cfg.NodeName)
	}
	c := &Cluster{c: cr, cfg: cfg, joined: true, name: cfg.NodeName, port: cfg.VXLANPort, keys: make(chan string, 1)}
	if c.port == 0 {
		c.port = DefaultVXLANPort
	}
	var err error
	if c.routing, err = model.ParseRouting(cfg.Routing); err != nil {
		return nil, err
	}
	if c.encap, err = model.ParseEncap(cfg.OverlayEncap); err != nil {
		return nil, err
	}
	if c.routing == model.RoutingNative {
		if cfg.OverlayEncap != "" && model.Encap(cfg.OverlayEncap) != model.EncapAuto {
			return nil, model.Fieldf("overlay-encap", "%q: native routing does not encapsulate (it needs --routing vxlan)", cfg.OverlayEncap)
		}
		c.encap = ""
	}
	for _, s := range cfg.ClusterCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			return nil, model.Fieldf("cluster-cidr", "%q: not a CIDR prefix like 10.244.0.0/16 or fd00:244::/48", s)
		}
		for _, o := range c.cidrs {
			if o.Overlaps(p) {
				return nil, model.Fieldf("cluster-cidr", "%s overlaps %s", p, o)
			}
		}
		c.cidrs = append(c.cidrs, p)
	}
	if len(c.cidrs) == 0 {
		return nil, model.Fieldf("cluster-cidr", "missing: give the cluster's pod prefix (IPv4 and/or IPv6) with --node-name")
	}
	if err := parseEncryption(cfg, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Start brings up this node's part of the cluster (setup) and starts
// the background work: the --nodes file's watcher and the peer probes,
// until the core is done. Nothing alone.
func (c *Cluster) Start() error {
	if !c.joined {
		return nil
	}
	if err := c.setup(); err != nil {
		return err
	}
	if c.cfg.NodesFile != "" {
		go c.watchNodesFile(c.cfg.NodesFile, c.c.Done())
	}
	if c.cfg.PeerProbeInterval > 0 {
		go c.probePeers(c.cfg.PeerProbeInterval, c.c.Done())
	}
	if c.wg != nil {
		go c.watchSessions(c.c.Done())
	}
	return nil
}

// setup brings up this node's part of the cluster: the VXLAN device
// and its programs (vxlan routing), the cluster CIDRs (drop_no_peer for
// what no node owns), every stored node's prefixes and routes, every
// network's VNI; what no record accounts for goes.
func (c *Cluster) setup() error {
	if err := c.setupEncryption(); err != nil {
		return err
	}
	if c.routing == model.RoutingVXLAN {
		l, err := netconf.EnsureOverlay(datapath.OverlayDevice, c.port, 1500-netconf.VXLANOverhead6)
		if err != nil {
			return err
		}
		c.overlayIfindex = l.Attrs().Index
		if err := c.dp().AttachOverlay(datapath.OverlayDevice, c.overlayIfindex); err != nil {
			return err
		}
		if err := c.setOverlayEncap(nil); err != nil {
			return err
		}
	} else {
		if err := errors.Join(c.dp().DetachOverlay(datapath.OverlayDevice), netconf.DeleteOverlay(datapath.OverlayDevice)); err != nil {
			return err
		}
	}
	want := map[netip.Prefix]bool{}
	for _, p := range c.cidrs {
		want[p] = true
		if err := c.dp().PutPeer(datapath.Peer{Prefix: p, Flags: datapath.PeerGone}); err != nil {
			return err
		}
	}
	var nodes []model.Node
	var nets []model.Network
	err := c.c.Store().View(func(tx *store.Tx) error {
		var err error
		if nodes, err = tx.Nodes(); err != nil {
			return err
		}
		nets, err = tx.Networks()
		return err
	})
	if err != nil {
		return err
	}
	self := SelfNode(nodes)
	wantRoutes := map[netip.Prefix]bool{}
	var errs []error
	for i := range nodes {
		for _, p := range nodes[i].PodCIDRs {
			want[p] = true
			if !nodes[i].Self {
				wantRoutes[p] = true
			}
		}
		// One peer's state does not stop the start (objerrs.go).
		err := c.applyNode(&nodes[i], self)
		if err != nil {
			c.c.Log().Error("join cluster: node not applied; the daemon runs on", "node", nodes[i].Name, "err", err)
		}
		c.c.ObjectError(core.ObjPeer, nodes[i].Name, err)
	}
	// Every mode's: what a peer tunnels to a kernel-mode pod carries its
	// network's VNI, and xlane_from_overlay hands it to Linux, which
	// routes it (a VNI no network has is drop_vni).
	for i := range nets {
		errs = append(errs, c.dp().SetNetworkVNI(nets[i].ID, NetworkVNI(&nets[i])))
	}
	peers, err := c.dp().Peers()
	errs = append(errs, err)
	for _, p := range peers {
		if !want[p.Prefix] {
			errs = append(errs, c.dp().DeletePeer(p.Prefix))
		}
	}
	if c.wg != nil {
		errs = append(errs, c.wg.Prune())
	}
	routes, err := netconf.PeerRoutes()
	errs = append(errs, err)
	for _, p := range routes {
		if !wantRoutes[p] {
			errs = append(errs, netconf.DeletePeerRoute(p))
		}
	}
	c.c.Log().Info("cluster joined", "node", c.name, "routing", c.routing, "cluster_cidrs", c.cidrs, "nodes", len(nodes))
	return errors.Join(errs...)
}

// SelfNode is this node's record among nodes, nil if it has none.
func SelfNode(nodes []model.Node) *model.Node {
	for i := range nodes {
		if nodes[i].Self {
			return &nodes[i]
		}
	}
	return nil
}

// NetworkVNI is a network's VNI (records older than VNIs: the default).
func NetworkVNI(n *model.Network) uint32 {
	if n.VNI != 0 {
		return n.VNI
	}
	return model.DefaultVNI(n.Name)
}

// peerUnderlay picks the address to reach peer by: the family this node's
// own underlay has, IPv4 first; without a self record, the peer's first.
func peerUnderlay(peer, self *model.Node) netip.Addr {
	for _, v4 := range []bool{true, false} {
		if a, ok := peer.UnderlayOf(v4); ok {
			if self == nil {
				return a
			}
			if _, ok := self.UnderlayOf(v4); ok {
				return a
			}
		}
	}
	return netip.Addr{}
}

// applyNode writes a node's prefixes into the datapath and routes them
// (idempotent). This node's own prefixes are marked self; its underlay's
// MTU sets the overlay's.
func (c *Cluster) applyNode(n, self *model.Node) error {
	if n.Self {
		for _, p := range n.PodCIDRs {
			if err := c.dp().PutPeer(datapath.Peer{Prefix: p, NodeID: n.ID, Flags: datapath.PeerSelf}); err != nil {
				return err
			}
		}
		if err := c.setClusterAddrs(n); err != nil {
			return err
		}
		if err := c.setOverlayEncap(n); err != nil {
			return err
		}
		if _, _, err := c.encryptNode(n, self); err != nil {
			return err
		}
		return c.setOverlayMTU(n)
	}
	under := peerUnderlay(n, self)
	to, encFlags, err := c.encryptNode(n, self)
	if err != nil {
		return err
	}
	if to.IsValid() {
		under = to // VXLAN inside WireGuard (encryption.go)
	}
	for _, p := range n.PodCIDRs {
		peer := datapath.Peer{Prefix: p, NodeID: n.ID, Underlay: under, Flags: encFlags}
		if c.peers.isDown(n.ID) {
			peer.Flags |= datapath.PeerDown
		}
		via := netip.Addr{}
		if c.routing == model.RoutingNative {
			peer.Flags |= datapath.PeerNative // keeps PeerDown
			a, ok := n.UnderlayOf(p.Addr().Is4())
			if !ok {
				return model.Fieldf("underlay", "node %q has no %s underlay address for its pod CIDR %s (native routing)", n.Name, family(p.Addr()), p)
			}
			peer.Underlay, via = a, a
		}
		if err := c.dp().PutPeer(peer); err != nil {
			return err
		}
		if via.IsValid() && netconf.BehindRouter(via) {
			// Another segment, behind a router: the route to its pods
			// is the router's to give (xlaned --bgp-asn learns it;
			// docs/bgp.md), the FIB takes it.
			continue
		}
		if err := netconf.EnsurePeerRoute(p, c.overlayIfindex, via); err != nil {
			return err
		}
	}
	return nil
}

// setClusterAddrs writes this node's cluster addresses into the
// datapath's node configuration: the first address of each of self's pod
// CIDRs (self nil: none). ipam never hands a subnet's first address to an
// endpoint, and every peer routes it to this node: it is the source of a
// flow from off the node whose service backend is another node's pod
// (bpf/lib/ct_nat.h), so that the backend's reply comes back here.
func (c *Cluster) setClusterAddrs(self *model.Node) error {
	var v4, v6 netip.Addr
	if self != nil {
		for _, p := range self.PodCIDRs {
			a := p.Masked().Addr()
			if a.Is4() && !v4.IsValid() {
				v4 = a
			} else if a.Is6() && !v6.IsValid() {
				v6 = a
			}
		}
	}
	err := c.c.UpdateNodeConfig(func(nc *datapath.NodeConfig) { nc.ClusterV4, nc.ClusterV6 = v4, v6 })
	if err != nil {
		return fmt.Errorf("cluster addresses: %w", err)
	}
	return nil
}

// setOverlayEncap tells the datapath how to tunnel (vxlan routing): with
// bpf encapsulation, the VXLAN port and self's underlay addresses, the
// outer sources (self nil: none yet, so the device tunnels until this
// node's record is added).
func (c *Cluster) setOverlayEncap(self *model.Node) error {
	if c.routing != model.RoutingVXLAN {
		return nil
	}
	e := datapath.OverlayEncap{BPF: c.encap == model.EncapBPF, Port: uint16(c.port), EncryptedRx: c.encrypt && c.cfg.EncryptionStrict}
	if self != nil {
		e.Src4, _ = self.UnderlayOf(true)
		e.Src6, _ = self.UnderlayOf(false)
	}
	if err := c.dp().SetOverlayEncap(e); err != nil {
		return fmt.Errorf("overlay encapsulation: %w", err)
	}
	return nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// setOverlayMTU sizes the VXLAN device (and the default container MTU)
// from the self node's underlay device: -50 for an IPv4 underlay, -70
// for IPv6.
func (c *Cluster) setOverlayMTU(self *model.Node) error {
	a, ok := self.UnderlayOf(true)
	overhead := netconf.VXLANOverhead4
	if !ok {
		a, _ = self.UnderlayOf(false)
		overhead = netconf.VXLANOverhead6
	}
	l := netconf.UnderlayLink(a)
	if l == nil {
		return nil
	}
	mtu := l.Attrs().MTU
	if c.routing == model.RoutingNative {
		c.mtu = mtu
		if err := netconf.EnableForwarding(l.Attrs().Name); err != nil {
			return err
		}
		// Peers' pods' packets come in by the underlay device: its tc
		// program delivers them to the endpoint and translates the
		// replies of flows DNATed here (a service's backend elsewhere).
		if l.Attrs().Name != c.cfg.Uplink {
			return c.dp().AttachUplinkTC(l.Attrs().Name, l.Attrs().Index)
		}
		return nil
	}
	c.mtu = mtu - overhead
	if wgMTU, podMTU, ok := c.encryptionMTU(self, mtu, overhead == netconf.VXLANOverhead4); ok {
		if err := c.wg.SetMTU(wgMTU); err != nil {
			return err
		}
		c.mtu = podMTU
	}
	_, err := netconf.EnsureOverlay(datapath.OverlayDevice, c.port, c.mtu)
	return err
}

// rememberUnderlayForwarding records, for `xlaned --uninstall`, the IPv4
// forwarding of the devices that carry this node's underlay addresses
// before native routing turns it on (setOverlayMTU, in AddNode's
// transaction). Nothing changes here; a request that fails validation
// leaves a record of the value as it is.
func (c *Cluster) rememberUnderlayForwarding(req model.Node) error {
	if c.routing != model.RoutingNative || req.Name != c.name {
		return nil
	}
	for _, a := range req.Underlay {
		if l := netconf.UnderlayLink(a); l != nil {
			if err := c.c.RememberForwarding4(l.Attrs().Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeNodeState undoes applyNode and forgets the node's flows.
func (c *Cluster) removeNodeState(n *model.Node) error {
	c.peers.forget(n.ID)
	errs := []error{c.unencryptNode(n)}
	if n.Self {
		errs = append(errs, c.setClusterAddrs(nil), c.setOverlayEncap(nil))
	}
	for _, p := range n.PodCIDRs {
		errs = append(errs, c.dp().DeletePeer(p))
		if !n.Self {
			errs = append(errs, netconf.DeletePeerRoute(p))
		}
	}
	// The cluster CIDR entries stay: the node's addresses are now
	// nobody's (drop_no_peer).
	flows, err := c.dp().DeleteFlowsOf(n.PodCIDRs)
	errs = append(errs, err)
	if flows > 0 {
		c.c.Log().Info("removed node's flows", "node", n.Name, "entries", flows)
	}
	return errors.Join(errs...)
}

func (c *Cluster) needCluster(what string) error {
	if !c.joined {
		return fmt.Errorf("%s: this xlaned runs alone: start it with --node-name and --cluster-cidr to join nodes: %w", what, model.ErrUnavailable)
	}
	if err := c.dp().Available(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// validateNode checks a node add against the cluster, this node and the
// nodes recorded (nodes: read once for a batch, AddNodes).
func (c *Cluster) validateNode(tx *store.Tx, nodes []model.Node, req model.Node) (*model.Node, error) {
	if !core.NameRE.MatchString(req.Name) {
		return nil, model.Fieldf("name", "%q: must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit", req.Name)
	}
	n := &model.Node{Name: req.Name, Self: req.Name == c.name, Created: time.Now().UTC()}
	if err := c.validateNodeKey(nodes, n, req.WGPublicKey); err != nil {
		return nil, err
	}
	if len(req.Underlay) == 0 {
		return nil, model.Fieldf("underlay", "missing: give the node's address on the network between nodes (IPv4 and/or IPv6)")
	}
	for _, a := range req.Underlay {
		s := a.String()
		a = a.Unmap()
		if !a.IsGlobalUnicast() && !a.IsPrivate() {
			return nil, model.Fieldf("underlay", "%q: not a unicast address another node can reach (loopback, link-local, multicast or unspecified)", s)
		}
		if _, dup := n.UnderlayOf(a.Is4()); dup {
			return nil, model.Fieldf("underlay", "%q: a node takes at most one IPv4 and one IPv6 underlay address", s)
		}
		local := netconf.IsLocalAddr(a)
		if n.Self && !local {
			return nil, model.Fieldf("underlay", "%s: not an address of this node, and %q is this node (--node-name)", a, n.Name)
		}
		if !n.Self && local {
			return nil, model.Fieldf("underlay", "%s is this node's own address: add this node as %q (its --node-name)", a, c.name)
		}
		n.Underlay = append(n.Underlay, a)
	}
	if len(req.PodCIDRs) == 0 {
		return nil, model.Fieldf("pod_cidrs", "missing: give the node's pod prefix (IPv4 and/or IPv6) inside the cluster CIDR %v", c.cidrs)
	}
	for _, p := range req.PodCIDRs {
		s := p.String()
		if p != p.Masked() {
			return nil, model.Fieldf("pod_cidrs", "%q: host bits set (did you mean %s?)", s, p.Masked())
		}
		if _, dup := n.PodCIDR(p.Addr().Is4()); dup {
			return nil, model.Fieldf("pod_cidrs", "%q: a node takes at most one IPv4 and one IPv6 pod CIDR", s)
		}
		if !slices.ContainsFunc(c.cidrs, func(cc netip.Prefix) bool { return cc.Bits() < p.Bits() && cc.Contains(p.Addr()) }) {
			return nil, model.Fieldf("pod_cidrs", "%s: not inside the cluster CIDR %v", p, c.cidrs)
		}
		if c.routing == model.RoutingNative && !n.Self {
			if _, ok := n.UnderlayOf(p.Addr().Is4()); !ok {
				return nil, model.Fieldf("underlay", "native routing needs an %s underlay address for the pod CIDR %s", family(p.Addr()), p)
			}
		}
		n.PodCIDRs = append(n.PodCIDRs, p)
	}
	if _, err := tx.Node(n.Name); err == nil {
		return nil, model.Conflictf("node %q already exists (remove it first to change it)", n.Name)
	}
	if err := c.validateNodeMTU(tx, nodes, n, req.MTU); err != nil {
		return nil, err
	}
	for _, o := range nodes {
		for _, a := range n.Underlay {
			if slices.Contains(o.Underlay, a) {
				return nil, model.Fieldf("underlay", "%s is node %q's already", a, o.Name)
			}
		}
		for _, p := range n.PodCIDRs {
			for _, op := range o.PodCIDRs {
				if op.Overlaps(p) {
					return nil, model.Fieldf("pod_cidrs", "%s overlaps %s of node %q", p, op, o.Name)
				}
			}
		}
	}
	if !n.Self {
		nets, err := tx.Networks()
		if err != nil {
			return nil, err
		}
		for _, nw := range nets {
			for _, s := range nw.Subnets {
				for _, p := range n.PodCIDRs {
					if s.Overlaps(p) {
						return nil, model.Fieldf("pod_cidrs", "%s overlaps the subnet %s of this node's network %q", p, s, nw.Name)
					}
				}
			}
		}
	}
	return n, nil
}

// AddNode validates and records a node and programs its prefixes and
// routes; on failure nothing stays behind.
func (c *Cluster) AddNode(req model.Node) (*model.Node, error) {
	c.c.Lock()
	defer c.c.Unlock()
	if err := c.needCluster("add node"); err != nil {
		return nil, err
	}
	if err := c.rememberUnderlayForwarding(req); err != nil {
		return nil, err
	}
	var n *model.Node
	applied := false
	err := c.c.Store().Update(func(tx *store.Tx) error {
		nodes, err := tx.Nodes()
		if err != nil {
			return err
		}
		n, applied, err = c.addNodeTx(tx, nodes, req)
		return err
	})
	if err != nil {
		if applied {
			c.rollBackNode(n)
		}
		return nil, err
	}
	c.c.Log().Info("node added", "node", n.Name, "underlay", n.Underlay, "pod_cidrs", n.PodCIDRs, "self", n.Self)
	return n, nil
}

// AddNodes adds many nodes in one store transaction (a sync of a
// cluster's thousands of Nodes: one commit, the records read once, not
// one of each per node). A node refused (its checks, its datapath
// entries) is logged and left out, nothing of it behind; the others are
// added. Only a failure of the transaction itself is an error: then none
// is added.
func (c *Cluster) AddNodes(reqs []model.Node) error {
	c.c.Lock()
	defer c.c.Unlock()
	if err := c.needCluster("add node"); err != nil {
		return err
	}
	var ok []model.Node
	for _, req := range reqs {
		if err := c.rememberUnderlayForwarding(req); err != nil {
			c.c.Log().Error("nodes: node refused", "node", req.Name, "err", err)
			continue
		}
		ok = append(ok, req)
	}
	var added []*model.Node
	err := c.c.Store().Update(func(tx *store.Tx) error {
		added = nil
		nodes, err := tx.Nodes()
		if err != nil {
			return err
		}
		for _, req := range ok {
			n, applied, err := c.addNodeTx(tx, nodes, req)
			if err != nil {
				if applied {
					c.rollBackNode(n)
				}
				c.c.Log().Error("nodes: node refused", "node", req.Name, "err", err)
				continue
			}
			added = append(added, n)
			nodes = append(nodes, *n)
		}
		return nil
	})
	if err != nil {
		for _, n := range added {
			c.rollBackNode(n)
		}
		return err
	}
	for _, n := range added {
		c.c.Log().Info("node added", "node", n.Name, "underlay", n.Underlay, "pod_cidrs", n.PodCIDRs, "self", n.Self)
	}
	return nil
}

// addNodeTx validates req against nodes (the records in tx), records it
// in tx and programs it. applied says whether the datapath may hold some
// of it (rollBackNode); failing, its record is not in tx.
func (c *Cluster) addNodeTx(tx *store.Tx, nodes []model.Node, req model.Node) (n *model.Node, applied bool, err error) {
	if n, err = c.validateNode(tx, nodes, req); err != nil {
		return nil, false, err
	}
	if n.ID, err = tx.NextNodeID(); err != nil {
		return nil, false, err
	}
	if err := c.applyNode(n, SelfNode(nodes)); err != nil {
		return n, true, err
	}
	if err := c.c.FaultPoint("node-applied"); err != nil {
		return n, true, err
	}
	if err := tx.PutNode(n); err != nil {
		return n, true, err
	}
	if !n.Self {
		return n, true, nil
	}
	// The self record decides which underlay family peers are reached
	// by: re-point them.
	for i := range nodes {
		if err := c.applyNode(&nodes[i], n); err != nil {
			return n, true, errors.Join(err, tx.DeleteNode(n.Name))
		}
	}
	return n, true, nil
}

// rollBackNode undoes what a failed add of n programmed.
func (c *Cluster) rollBackNode(n *model.Node) {
	if err := c.removeNodeState(n); err != nil {
		c.c.Log().Error("roll back node", "node", n.Name, "err", err)
	}
}

// RemoveNode removes a node's record, prefixes, routes and conntrack
// entries. Missing is not an error.
func (c *Cluster) RemoveNode(name string) error {
	c.c.Lock()
	defer c.c.Unlock()
	if err := c.needCluster("remove node"); err != nil {
		return err
	}
	var n *model.Node
	err := c.c.Store().View(func(tx *store.Tx) error {
		var err error
		n, err = tx.Node(name)
		return err
	})
	if errors.Is(err, model.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.removeNodeState(n); err != nil {
		return err
	}
	if err := c.c.Store().Update(func(tx *store.Tx) error { return tx.DeleteNode(name) }); err != nil {
		return err
	}
	c.c.Log().Info("node removed", "node", name)
	return nil
}

// Nodes lists the nodes.
func (c *Cluster) Nodes() ([]model.Node, error) {
	var out []model.Node
	err := c.c.Store().View(func(tx *store.Tx) error {
		var err error
		out, err = tx.Nodes()
		return err
	})
	c.withLiveness(out)
	c.withEncryption(out)
	return out, err
}

// Node returns one node.
func (c *Cluster) Node(name string) (*model.Node, error) {
	var n *model.Node
	err := c.c.Store().View(func(tx *store.Tx) error {
		var err error
		n, err = tx.Node(name)
		return err
	})
	if n != nil {
		if !n.Self {
			n.Liveness = c.peers.liveness(n.ID)
		}
		if one := []model.Node{*n}; c.withEncryption(one) {
			n.Encryption = one[0].Encryption
		}
	}
	return n, err
}

// Info says how this node is joined ("" name: alone).
func (c *Cluster) Info() api.ClusterInfo {
	if !c.joined {
		return api.ClusterInfo{}
	}
	info := api.ClusterInfo{NodeName: c.name, Routing: string(c.routing), MTU: c.mtu}
	for _, p := range c.cidrs {
		info.ClusterCIDRs = append(info.ClusterCIDRs, p.String())
	}
	if c.routing == model.RoutingVXLAN {
		info.Device, info.VXLANPort, info.OverlayEncap = datapath.OverlayDevice, c.port, string(c.encap)
	}
	info.Encryption = c.encryptionInfo()
	return info
}

// NetworkSubnets is network create's view of the cluster: subnets nobody
// gave come from this node's pod CIDRs; a subnet inside the cluster CIDR
// must be inside them.
func (c *Cluster) NetworkSubnets(tx *store.Tx, req *api.NetworkCreate) error {
	if !c.joined {
		return nil
	}
	nodes, err := tx.Nodes()
	if err != nil {
		return err
	}
	self := SelfNode(nodes)
	if len(req.Subnets) == 0 && self != nil {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for _, p := range self.PodCIDRs {
			taken := slices.ContainsFunc(nets, func(n model.Network) bool {
				return slices.ContainsFunc(n.Subnets, p.Overlaps)
			})
			if !taken {
				req.Subnets = append(req.Subnets, p.String())
			}
		}
		if len(req.Subnets) == 0 {
			return model.Fieldf("subnets", "missing, and this node's pod CIDRs %v are taken by other networks", self.PodCIDRs)
		}
		return nil
	}
	for _, s := range req.Subnets {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue // parseSubnet says why
		}
		for _, cc := range c.cidrs {
			if !cc.Overlaps(p) {
				continue
			}
			var own []string
			inside := false
			if self != nil {
				for _, sp := range self.PodCIDRs {
					own = append(own, sp.String())
					inside = inside || sp.Bits() <= p.Bits() && sp.Contains(p.Addr())
				}
			}
			if !inside {
				return model.Fieldf("subnets", "%s is in the cluster CIDR %s but not in this node's pod CIDRs [%s]", p, cc, strings.Join(own, " "))
			}
		}
	}
	return nil
}

func (c *Cluster) dp() datapath.Datapath { return c.c.Datapath() }

// CheckConfig is New's check of the flags alone: xlaned makes it before
// anything is opened, so that a bad flag changes nothing.
func CheckConfig(cfg Config) error {
	_, err := New(nil, cfg)
	return err
}
