package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/cluster"
	"github.com/xlane-dev/xlane/internal/ipam"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// CNI attachments (xlane-cni): endpoints keyed by container ID and
// interface name, with the CNI network that added them. They are ordinary
// endpoints (model.Endpoint.Attachment says whose), persisted in the store
// like the rest, so a restarted xlaned keeps and re-applies them.

// AddAttachment attaches a container's interface (CNI ADD), creating the
// network first when it is missing and req.Create says how. An ADD repeated
// for the same key and netns (a runtime retrying) returns the endpoint the
// first one made; for another netns it is a conflict.
func (d *Daemon) AddAttachment(req api.AttachmentAdd) (*model.Endpoint, error) {
	if err := model.ValidContainerID(req.ContainerID); err != nil {
		return nil, err
	}
	switch {
	case req.IfName == "":
		return nil, model.Fieldf("ifname", "missing")
	case req.CNINetwork == "":
		return nil, model.Fieldf("cni_network", "missing")
	case req.Netns == "":
		return nil, model.Fieldf("netns", "missing")
	}
	// Before the network is made: a namespace an endpoint must not get
	// (xlaned's own, the root one) leaves nothing behind.
	if _, err := netconf.ResolveNetns(req.Netns); err != nil {
		return nil, err
	}
	if err := d.attachmentNetwork(req); err != nil {
		return nil, err
	}
	id := model.AttachmentID(req.ContainerID, req.IfName)
	if e, err := d.endpointRecord(id); err == nil {
		return d.sameAttachment(e, req)
	} else if !errors.Is(err, model.ErrNotFound) {
		return nil, err
	}
	att := &model.Attachment{ContainerID: req.ContainerID, IfName: req.IfName, CNINetwork: req.CNINetwork}
	e, err := d.addEndpoint(api.EndpointAdd{ID: id, Network: req.Network, Netns: req.Netns, IfName: req.IfName,
		IPs: req.IPs, MAC: req.MAC}, att)
	if err != nil || len(req.Ports) == 0 {
		return e, err
	}
	if e, err = d.PublishPorts(id, api.PortsUpdate{Ports: req.Ports}, false); err != nil {
		// All or nothing: the runtime retries the whole ADD.
		if rerr := d.RemoveEndpoint(id); rerr != nil {
			d.log.Error("roll back attachment", "endpoint", id, "err", rerr)
		}
		return nil, err
	}
	return e, nil
}

// sameAttachment returns e when it is what req would make (a repeated
// ADD), else the conflict.
func (d *Daemon) sameAttachment(e *model.Endpoint, req api.AttachmentAdd) (*model.Endpoint, error) {
	if e.Attachment == nil {
		return nil, model.Conflictf("endpoint %q exists and is not a CNI attachment", e.ID)
	}
	netns, err := netconf.ResolveNetns(req.Netns)
	if err != nil {
		return nil, err
	}
	if e.Netns != netns || e.Network != req.Network {
		return nil, model.Conflictf("container %s interface %s is attached already (network %q, netns %s)",
			req.ContainerID, req.IfName, e.Network, e.Netns)
	}
	return e, nil
}

// attachmentNetwork makes sure req's network exists: creates it from
// req.Create where it is missing, and checks an existing one against the
// mode and device req.Create asks for.
func (d *Daemon) attachmentNetwork(req api.AttachmentAdd) error {
	n, err := d.networkRecord(req.Network)
	if errors.Is(err, model.ErrNotFound) {
		if req.Create == nil || len(req.Create.Subnets) == 0 && !d.f.Cluster.Joined() {
			return model.Fieldf("network", "%q: no such network on this node (give subnets to create it)", req.Network)
		}
		c := *req.Create
		c.Name = req.Network
		_, err := d.CreateNetwork(c)
		if errors.Is(err, model.ErrConflict) {
			// Another ADD created it meanwhile, or the subnets clash:
			// only the first is fine.
			if _, nerr := d.networkRecord(req.Network); nerr == nil {
				return nil
			}
		}
		return err
	}
	if err != nil || req.Create == nil {
		return err
	}
	if m := req.Create.Mode; m != "" && m != string(n.Mode) && m != string(n.ModeRequested) {
		return model.Fieldf("mode", "%q: network %q runs %s (asked for %s); change it with `xlane network update` or ask for that",
			m, n.Name, n.Mode, n.ModeRequested)
	}
	if dev := req.Create.Device; dev != "" && dev != string(model.DeviceAuto) && dev != string(n.Devices()) {
		return model.Fieldf("device", "%q: network %q has %s endpoints", dev, n.Name, n.Devices())
	}
	return nil
}

// Attachment returns the endpoint of a CNI attachment (CNI CHECK), or
// model.ErrNotFound.
func (d *Daemon) Attachment(containerID, ifname string) (*api.EndpointInfo, error) {
	id := model.AttachmentID(containerID, ifname)
	e, err := d.endpointRecord(id)
	if err != nil {
		return nil, err
	}
	if e.Attachment == nil {
		return nil, model.NotFoundf("attachment %s/%s (endpoint %q is not one)", containerID, ifname, id)
	}
	return d.Endpoint(id)
}

// RemoveAttachment removes a CNI attachment and everything it holds (CNI
// DEL): a missing one, or a missing netns or device, is not an error. An
// endpoint of the same ID that is not an attachment is left alone.
func (d *Daemon) RemoveAttachment(containerID, ifname string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, n, err := d.endpointAndNetwork(model.AttachmentID(containerID, ifname))
	if errors.Is(err, model.ErrNotFound) && e == nil || err == nil && e.Attachment == nil {
		return nil
	}
	if err != nil {
		return err
	}
	return d.removeEndpoint(e, n)
}

// GCAttachments removes every attachment of req.CNINetwork whose key is not
// in req.Valid (CNI GC), with all it holds: devices, datapath entries and
// pinned links, published ports, conntrack and NAT entries, address leases
// and records. It then releases what no record accounts for: leases without
// an endpoint, xlane devices, pins and endpoint map entries left by a
// crash.
func (d *Daemon) GCAttachments(req api.AttachmentGC) (*api.AttachmentGCResult, error) {
	if req.CNINetwork == "" {
		return nil, model.Fieldf("cni_network", "missing")
	}
	valid := map[api.AttachmentKey]bool{}
	for _, k := range req.Valid {
		valid[k] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	nets, eps, err := d.storedNetworksAndEndpoints()
	if err != nil {
		return nil, err
	}
	res := &api.AttachmentGCResult{Removed: []string{}}
	var errs []error
	for i := range eps {
		e := &eps[i]
		a := e.Attachment
		if a == nil || a.CNINetwork != req.CNINetwork || valid[api.AttachmentKey{ContainerID: a.ContainerID, IfName: a.IfName}] {
			continue
		}
		n := networkNamed(nets, e.Network)
		if n == nil {
			errs = append(errs, model.NotFoundf("network %q of endpoint %s", e.Network, e.ID))
			continue
		}
		if err := d.removeEndpoint(e, n); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed = append(res.Removed, e.ID)
	}
	leases, err := d.releaseOrphanLeases()
	res.Leases = leases
	errs = append(errs, err, d.removeUnaccounted())
	if len(res.Removed) > 0 || leases > 0 {
		d.log.Info("cni gc", "cni_network", req.CNINetwork, "removed", res.Removed, "leases", leases)
	}
	return res, errors.Join(errs...)
}

// releaseOrphanLeases releases the leases whose endpoint does not exist.
func (d *Daemon) releaseOrphanLeases() (int, error) {
	released := 0
	err := d.store.Update(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		if err != nil {
			return err
		}
		for _, n := range nets {
			leases, err := tx.Leases(n.Name)
			if err != nil {
				return err
			}
			for a, owner := range leases {
				if _, err := tx.Endpoint(owner); !errors.Is(err, model.ErrNotFound) {
					continue
				}
				if err := ipam.Release(tx, n.Name, []netip.Addr{a}); err != nil {
					return err
				}
				released++
			}
		}
		return nil
	})
	return released, err
}

// AttachmentStatus says whether an ADD to network can succeed now (CNI
// STATUS): the network exists, its mode's datapath runs, and every subnet
// has an address left.
func (d *Daemon) AttachmentStatus(network string) (*api.AttachmentStatus, error) {
	st := &api.AttachmentStatus{Network: network}
	err := d.store.View(func(tx *store.Tx) error {
		n, err := tx.Network(network)
		if errors.Is(err, model.ErrNotFound) {
			st.Missing, st.Reason = true, fmt.Sprintf("network %q does not exist", network)
			if d.f.Cluster.Joined() {
				nodes, err := tx.Nodes()
				if err != nil {
					return err
				}
				self := cluster.SelfNode(nodes)
				st.PodCIDRs = self != nil && len(self.PodCIDRs) > 0
			}
			return nil
		}
		if err != nil {
			return err
		}
		if n.Mode.BPF() {
			if err := d.dp.Available(); err != nil {
				st.Reason = fmt.Sprintf("network %q is in %s mode: %v", n.Name, n.Mode, err)
				return nil
			}
		}
		if err := ipam.Exhausted(tx, n); err != nil {
			st.Reason, st.Exhausted = err.Error(), true
			return nil
		}
		st.Ready = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (d *Daemon) endpointRecord(id string) (*model.Endpoint, error) {
	var e *model.Endpoint
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		e, err = tx.Endpoint(id)
		return err
	})
	return e, err
}

func (d *Daemon) networkRecord(name string) (*model.Network, error) {
	var n *model.Network
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		n, err = tx.Network(name)
		return err
	})
	return n, err
}

// endpointAndNetwork reads an endpoint and its network; e is nil when the
// endpoint is missing.
func (d *Daemon) endpointAndNetwork(id string) (e *model.Endpoint, n *model.Network, err error) {
	err = d.store.View(func(tx *store.Tx) error {
		var err error
		if e, err = tx.Endpoint(id); err != nil {
			return err
		}
		n, err = tx.Network(e.Network)
		return err
	})
	return e, n, err
}

func networkNamed(nets []model.Network, name string) *model.Network {
	i := slices.IndexFunc(nets, func(n model.Network) bool { return n.Name == name })
	if i < 0 {
		return nil
	}
	return &nets[i]
}

// hostPrefixes turns addresses into /32 and /128 prefixes.
func hostPrefixes(addrs []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}
