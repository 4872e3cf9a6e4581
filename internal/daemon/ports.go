package daemon

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// portEntries lists the datapath entries of e's published ports: one per
// address family the endpoint has.
func portEntries(e *model.Endpoint) []datapath.Port {
	var out []datapath.Port
	for _, pm := range e.Ports {
		for _, a := range e.IPs {
			if pm.HostIP.IsValid() && pm.HostIP.Is4() != a.Is4() {
				continue // published on an address of the other family
			}
			out = append(out, datapath.Port{Proto: protoNumber(pm.Proto), NodePort: pm.NodePort, Addr: a, Port: pm.Port, HostIP: pm.HostIP})
		}
	}
	return out
}

// PublishPorts publishes (or, with withdraw, withdraws) ports of an
// endpoint. A node port another endpoint publishes is a conflict.
func (d *Daemon) PublishPorts(id string, req api.PortsUpdate, withdraw bool) (*model.Endpoint, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dp.Available(); err != nil {
		return nil, fmt.Errorf("publish ports: %w", err)
	}
	var e *model.Endpoint
	err := d.store.Update(func(tx *store.Tx) error {
		var err error
		if e, err = tx.Endpoint(id); err != nil {
			return err
		}
		n, err := tx.Network(e.Network)
		if err != nil {
			return err
		}
		if !withdraw {
			if err := natSupported(n.Mode, true); err != nil {
				return fmt.Errorf("network %q: published ports: %w", n.Name, err)
			}
			if err := deviceNAT(n); err != nil { // kernel.go
				return fmt.Errorf("network %q: published ports: %w", n.Name, err)
			}
		}
		all, err := tx.Endpoints()
		if err != nil {
			return err
		}
		if len(req.Ports) == 0 {
			return model.Fieldf("ports", "missing: give NODEPORT:PORT[/tcp|udp]")
		}
		old := portEntries(e)
		for _, s := range req.Ports {
			pm, err := model.ParsePortMapping(s)
			if err != nil {
				return err
			}
			idx := slices.IndexFunc(e.Ports, func(x model.PortMapping) bool {
				return x.NodePort == pm.NodePort && x.Proto == pm.Proto && x.HostIP == pm.HostIP
			})
			if withdraw {
				if idx >= 0 {
					e.Ports = slices.Delete(e.Ports, idx, idx+1)
				}
				continue
			}
			if pm.HostIP.IsValid() && !slices.ContainsFunc(e.IPs, func(a netip.Addr) bool { return a.Is4() == pm.HostIP.Is4() }) {
				return model.Fieldf("ports", "%s: host address %s: the endpoint has no address of its family", pm, pm.HostIP)
			}
			for _, o := range all {
				if o.ID == e.ID {
					continue
				}
				for _, op := range o.Ports {
					if op.SameHostPort(pm) {
						return model.Conflictf("node port %s is published by endpoint %s", pm.HostPort(), o.ID)
					}
				}
			}
			if idx >= 0 {
				e.Ports[idx] = pm
			} else {
				e.Ports = append(e.Ports, pm)
			}
		}
		if err := d.syncPorts(old, portEntries(e)); err != nil {
			d.syncPorts(portEntries(e), old)
			return err
		}
		return tx.PutEndpoint(e)
	})
	if err != nil {
		return nil, err
	}
	d.log.Info("ports published", "endpoint", id, "ports", e.Ports)
	return e, nil
}

// syncPorts moves the datapath from the old entries to the new ones.
func (d *Daemon) syncPorts(old, new []datapath.Port) error {
	for _, p := range old {
		if !slices.Contains(new, p) {
			if err := d.dp.DeletePort(p); err != nil {
				return err
			}
		}
	}
	for _, p := range new {
		if err := d.dp.PutPort(p); err != nil {
			return fmt.Errorf("publish %d/%d: %w", p.NodePort, p.Proto, err)
		}
	}
	return nil
}
