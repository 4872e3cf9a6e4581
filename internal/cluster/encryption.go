package cluster

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/metrics"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
	"github.com/xlane-dev/xlane/internal/wireguard"
)

// Encryption between nodes (internal/wireguard, docs/encryption.md): the
// cluster's hooks. With xlaned --encryption wireguard the overlay tunnels
// to each peer's cluster address, which is routed into the WireGuard
// device: VXLAN inside WireGuard.

// EncryptionWireGuard is --encryption's one mode.
const EncryptionWireGuard = "wireguard"

// parseEncryption checks the encryption flags against the cluster's and
// makes the overlay encapsulate in the VXLAN device (whose packets Linux
// routes into the WireGuard device; BPF encapsulation would hand them to
// the underlay device in cleartext).
func parseEncryption(cfg Config, c *Cluster) error {
	switch cfg.Encryption {
	case "", "none":
		if cfg.EncryptionStrict {
			return model.Fieldf("encryption-strict", "needs --encryption wireguard")
		}
		if cfg.EncryptionNode {
			return model.Fieldf("encryption-node", "needs --encryption wireguard")
		}
		return nil
	case EncryptionWireGuard:
	default:
		return model.Fieldf("encryption", "%q: want wireguard or none", cfg.Encryption)
	}
	if c == nil || !c.joined {
		return model.Fieldf("node-name", "missing: --encryption encrypts the traffic between the nodes of a cluster: it needs --node-name and --cluster-cidr")
	}
	if c.routing == model.RoutingNative {
		return model.Fieldf("encryption", "wireguard: with --routing native not built yet: use --routing vxlan (the overlay is then carried inside WireGuard)")
	}
	if cfg.OverlayEncap == string(model.EncapBPF) {
		return model.Fieldf("overlay-encap", "bpf: the tc program would put the VXLAN packets on the underlay device, past the WireGuard device: with --encryption use device (or auto)")
	}
	c.encap = model.EncapDevice
	c.encrypt = true
	return nil
}

// setupEncryption opens the WireGuard device with this node's key (made
// and stored at the first start with encryption) and records the
// setting; without encryption it removes a device a former run left.
func (c *Cluster) setupEncryption() error {
	var key []byte
	err := c.c.Store().Update(func(tx *store.Tx) error {
		was, err := tx.Encryption()
		if err != nil {
			return err
		}
		now := ""
		if c.encrypt {
			now = EncryptionWireGuard
		}
		if was != now {
			c.c.Log().Warn("encryption between nodes changed", "was", orNone(was), "now", orNone(now))
		}
		if !c.encrypt {
			return tx.PutEncryption("")
		}
		if key, err = tx.WireGuardKey(); err != nil {
			return err
		}
		if key == nil {
			k, err := wireguard.GenerateKey()
			if err != nil {
				return fmt.Errorf("generate WireGuard key: %w", err)
			}
			key = k[:]
			if err := tx.PutWireGuardKey(key); err != nil {
				return err
			}
			c.c.Log().Info("WireGuard key pair generated", "public_key", k.PublicKey().String())
		}
		return tx.PutEncryption(EncryptionWireGuard)
	})
	if err != nil {
		return fmt.Errorf("encryption: %w", err)
	}
	if !c.encrypt {
		return wireguard.Remove()
	}
	var priv wireguard.Key
	copy(priv[:], key)
	// The MTU until this node's record says its underlay's (setOverlayMTU).
	t, err := wireguard.Open(wireguard.Config{Port: c.cfg.WireGuardPort, Engine: c.cfg.WireGuardEngine,
		Strict: c.cfg.EncryptionStrict, Node: c.cfg.EncryptionNode, VXLANPort: c.port, ClearTCP: c.cfg.EncryptionClearTCP,
		Log: c.c.Log()}, priv, 1500-wireguard.Overhead6)
	if err != nil {
		return fmt.Errorf("encryption: %w", err)
	}
	c.wg = t
	c.c.Log().Info("encryption between nodes", "engine", t.Engine(), "device", wireguard.Device, "public_key", t.PublicKey().String(),
		"strict", t.Strict(), "node_traffic", c.cfg.EncryptionNode)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// validateNodeKey checks a node's WireGuard public key against the
// nodes recorded (nodes): this node's is its daemon's (filled in); a
// peer's is required with encryption, and no other node's. Without
// encryption a key given must still be one.
func (c *Cluster) validateNodeKey(nodes []model.Node, n *model.Node, given string) error {
	if n.Self && c.wg != nil {
		own := c.wg.PublicKey().String()
		if given != "" && given != own {
			return model.Fieldf("wg_public_key", "%q: not this node's own public key %s (leave it out for this node)", given, own)
		}
		n.WGPublicKey = own
		return nil
	}
	if given == "" && c.wg == nil {
		return nil
	}
	k, err := wireguard.ParsePublicKey("wg_public_key", given)
	if err != nil {
		return err
	}
	if c.wg != nil && k == c.wg.PublicKey() {
		return model.Fieldf("wg_public_key", "%s is this node's own public key", k)
	}
	for _, o := range nodes {
		if o.Name != n.Name && o.WGPublicKey == k.String() {
			return model.Fieldf("wg_public_key", "%s is node %q's already", k, o.Name)
		}
	}
	n.WGPublicKey = k.String()
	return nil
}

// encryptNode puts a node on the WireGuard device (this node: its cluster
// addresses; a peer: its key, endpoint and cluster addresses) and returns
// the address the overlay tunnels to it by: the peer's cluster address
// (invalid: encryption off, or a peer without a working session falling
// back to the cleartext overlay: keep the underlay's), and the peer
// entries' flags (datapath.PeerUnencrypted: strict, no working session).
func (c *Cluster) encryptNode(n, self *model.Node) (netip.Addr, uint16, error) {
	if c.wg == nil {
		return netip.Addr{}, 0, nil
	}
	if n.Self {
		return netip.Addr{}, 0, c.wg.SetAddrs(wireguard.ClusterAddrs(n.PodCIDRs))
	}
	k, err := wireguard.ParsePublicKey("wg_public_key", n.WGPublicKey)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("node %q: %w", n.Name, err)
	}
	var selfCIDRs []netip.Prefix
	if self != nil {
		selfCIDRs = self.PodCIDRs
	}
	to := wireguard.TunnelAddr(n.PodCIDRs, selfCIDRs)
	p := wireguard.Peer{Node: n.Name, PublicKey: k, Addrs: wireguard.ClusterAddrs(n.PodCIDRs),
		Endpoint: netip.AddrPortFrom(peerUnderlay(n, self), uint16(c.wg.Port())), Underlay: n.Underlay}
	if self != nil {
		p.SelfUnderlay = self.Underlay
	}
	err = c.wg.SetPeer(p)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	switch through, strict := c.wg.Encrypts(n.Name); {
	case through:
		return to, 0, nil
	case strict:
		return to, datapath.PeerUnencrypted, nil // drop_unencrypted
	default:
		return netip.Addr{}, 0, nil // the cleartext overlay
	}
}

// watchSessions runs until done: every second each peer's WireGuard
// session is read (wireguard.Tunnel.Check), and a peer whose traffic
// changes course (a session made or lost, a grace over) has its datapath
// entries rewritten: into WireGuard, dropped (strict) or the cleartext
// overlay.
func (c *Cluster) watchSessions(done <-chan struct{}) {
	t := time.NewTicker(sessionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		changed, err := c.wg.Check(time.Now())
		if err != nil {
			c.c.Log().Error("encryption: read the sessions", "err", err)
			continue
		}
		for _, name := range changed {
			c.reapplyPeer(name)
		}
	}
}

// sessionCheckInterval is how often the peers' sessions are read.
const sessionCheckInterval = time.Second

// reapplyPeer rewrites node name's datapath entries (encryptNode gives
// the course of its traffic).
func (c *Cluster) reapplyPeer(name string) {
	c.c.Lock()
	defer c.c.Unlock()
	nodes, err := c.Nodes()
	if err != nil {
		c.c.Log().Error("encryption: list nodes", "err", err)
		return
	}
	for i := range nodes {
		n := &nodes[i]
		if n.Name != name || n.Self {
			continue
		}
		if err := c.applyNode(n, SelfNode(nodes)); err != nil {
			c.c.Log().Error("encryption: apply a peer's session", "node", name, "err", err)
			return
		}
		switch through, strict := c.wg.Encrypts(name); {
		case through:
			c.c.Log().Info("encryption: the peer's traffic goes through WireGuard", "node", name)
		case strict:
			c.c.Log().Warn("encryption: no working WireGuard session with the peer: its pods' traffic is dropped (drop_unencrypted, --encryption-strict)", "node", name)
		default:
			c.c.Log().Warn("encryption: no working WireGuard session with the peer: its pods' traffic falls back to the overlay IN CLEARTEXT (--encryption-strict refuses that)", "node", name)
		}
		return
	}
}

// unencryptNode takes a node off the WireGuard device.
func (c *Cluster) unencryptNode(n *model.Node) error {
	if c.wg == nil {
		return nil
	}
	if n.Self {
		return c.wg.SetAddrs(nil)
	}
	return c.wg.RemovePeer(n.Name)
}

// encryptionMTU is the WireGuard device's MTU over an underlay of mtu
// (v4: an IPv4 underlay) and the pods' under it (VXLAN inside WireGuard,
// over the tunnel address's family, this node's pod CIDRs': IPv4 first);
// ok false: encryption off.
func (c *Cluster) encryptionMTU(self *model.Node, mtu int, v4 bool) (wgMTU, podMTU int, ok bool) {
	if c.wg == nil {
		return 0, 0, false
	}
	wgMTU = mtu - wireguard.Overhead6
	if v4 {
		wgMTU = mtu - wireguard.Overhead4
	}
	podMTU = wgMTU - netconf.VXLANOverhead6
	if _, has4 := self.PodCIDR(true); has4 {
		podMTU = wgMTU - netconf.VXLANOverhead4
	}
	return wgMTU, podMTU, true
}

// EncryptionAddrs are the WireGuard device's addresses: this node's
// cluster addresses, in its pod CIDRs (nil: encryption off). A network's
// subnet may hold them (netconf.CheckSubnetFree).
func (c *Cluster) EncryptionAddrs() []netip.Addr {
	if c.wg == nil {
		return nil
	}
	return c.wg.Addrs()
}

// encryptionInfo is the tunnel as status shows it (nil: off).
func (c *Cluster) encryptionInfo() *api.EncryptionInfo {
	if c.wg == nil {
		return nil
	}
	return c.wg.Status()
}

// Close lets go of the WireGuard device (the embedded engine's goes with
// xlaned; the kernel's stays for the next start to adopt).
func (c *Cluster) Close() {
	if c.wg != nil {
		c.wg.Close()
	}
}

// UninstallEncryption removes the WireGuard device and its routes (the key
// goes with the state file).
func UninstallEncryption() error { return wireguard.Remove() }

// WireGuardMetrics are the peers' sessions for the metrics (nil: no
// encryption).
func (c *Cluster) WireGuardMetrics() []metrics.WireGuardPeer {
	info := c.encryptionInfo()
	if info == nil {
		return nil
	}
	var out []metrics.WireGuardPeer
	for _, p := range info.Peers {
		m := metrics.WireGuardPeer{Node: p.Node, RxBytes: p.RxBytes, TxBytes: p.TxBytes, HandshakeAge: -1,
			Encrypted: p.State == wireguard.StateEncrypted, State: p.State, Reason: p.Reason}
		if p.LastHandshake != nil {
			m.HandshakeAge = time.Since(*p.LastHandshake)
		}
		out = append(out, m)
	}
	return out
}

// withEncryption fills in each peer's WireGuard session (false: no
// encryption).
func (c *Cluster) withEncryption(nodes []model.Node) bool {
	info := c.encryptionInfo()
	if info == nil {
		return false
	}
	for i := range nodes {
		for _, p := range info.Peers {
			if p.Node == nodes[i].Name && !nodes[i].Self {
				nodes[i].Encryption = &model.NodeEncryption{State: p.State, Reason: p.Reason, Detail: p.Detail,
					LastHandshake: p.LastHandshake, RxBytes: p.RxBytes, TxBytes: p.TxBytes}
			}
		}
	}
	return true
}
