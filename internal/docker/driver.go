package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// Daemon is what the driver needs of xlaned (a *daemon.Daemon).
type Daemon interface {
	CreateNetwork(api.NetworkCreate) (*model.Network, error)
	DeleteNetwork(name string, force bool) error
	Network(name string) (*api.NetworkInfo, error)
	AddEndpoint(api.EndpointAdd) (*model.Endpoint, error)
	RemoveEndpoint(id string) error
	Endpoint(id string) (*api.EndpointInfo, error)
	PublishPorts(id string, req api.PortsUpdate, withdraw bool) (*model.Endpoint, error)
	Store() *store.Store
}

// Driver answers Docker's remote driver calls on top of a Daemon.
type Driver struct {
	mu  sync.Mutex // serialises every call: each is a few netlink operations
	d   Daemon
	log *slog.Logger

	// What the driver does to the node itself; unit tests replace these.
	peerOnNode         func(ifname string) bool // is the veth peer still in the node's namespace?
	allowForwarding    func() error             // see firewall.go
	disallowForwarding func() error
	startProxy         func(proto, listen string, target netip.AddrPort) (stopper, error) // see proxy.go

	proxies map[string][]stopper // endpoint ID -> its port proxies
}

type stopper interface{ stop() }

// New returns a driver backed by d.
func New(d Daemon, log *slog.Logger) *Driver {
	if log == nil {
		log = slog.Default()
	}
	dr := &Driver{
		d: d, log: log,
		peerOnNode: func(ifname string) bool {
			_, err := net.InterfaceByName(ifname)
			return err == nil
		},
		allowForwarding:    allowForwarding,
		disallowForwarding: removeForwarding,
		proxies:            map[string][]stopper{},
	}
	dr.startProxy = func(proto, listen string, target netip.AddrPort) (stopper, error) {
		if proto == "udp" {
			return startUDPProxy(listen, target, dr.log)
		}
		return startProxy(listen, target, dr.log)
	}
	return dr
}

var (
	dockerIDRE = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
	ifPrefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,9}$`) // leaves room for the index within IFNAMSIZ
)

// NetworkName is the xlane network that backs the Docker network id.
func NetworkName(id string) string {
	if len(id) > 12 {
		id = id[:12]
	}
	return "docker-" + id
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func checkID(what, id string) error {
	if !dockerIDRE.MatchString(id) {
		return fmt.Errorf("%s ID %q is not a Docker ID (12 to 64 lowercase hex digits)", what, id)
	}
	return nil
}

// Resume runs when xlaned starts serving Docker: it checks the records of
// Docker networks against the xlane networks behind them, and puts back
// what lives only in this process or may have been flushed: the forwarding
// rules and the node-local relays of published ports.
func (dr *Driver) Resume() error {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	var nets []store.DockerNetwork
	err := dr.d.Store().View(func(tx *store.Tx) error {
		var err error
		nets, err = tx.DockerNetworks()
		return err
	})
	if err != nil {
		return err
	}
	for _, n := range nets {
		if _, err := dr.d.Network(n.Network); err != nil {
			dr.log.Warn("docker: the xlane network of a Docker network is gone; remove the Docker network", "docker_network", short(n.ID), "network", n.Network, "err", err)
		}
	}
	if len(nets) > 0 {
		if err := dr.allowForwarding(); err != nil {
			dr.log.Warn("docker: "+err.Error(), "networks", len(nets))
		}
	}
	var eps []store.DockerEndpoint
	err = dr.d.Store().View(func(tx *store.Tx) error {
		var err error
		eps, err = tx.DockerEndpoints()
		return err
	})
	if err != nil {
		return err
	}
	for _, de := range eps {
		if len(de.Ports)+len(de.Relays) > 0 {
			if err := dr.proxyPorts(de.ID, de.Ports, de.Relays); err != nil {
				dr.log.Warn("docker: published ports are not relayed for connections from the node itself", "endpoint", short(de.ID), "err", err)
			}
		}
	}
	dr.log.Info("docker: driver state loaded", "networks", len(nets))
	return nil
}

// ---- networks ----

// networkConfig is a validated CreateNetwork request.
type networkConfig struct {
	create api.NetworkCreate
	rec    store.DockerNetwork
}

func parseNetwork(req *createNetworkRequest, log *slog.Logger) (*networkConfig, error) {
	if err := checkID("network", req.NetworkID); err != nil {
		return nil, err
	}
	masq := true // as on Docker's bridge, unless the option says otherwise
	c := &networkConfig{
		// veth: Docker configures the container side as on a bridge (on-link
		// subnet, ARP), which netkit's L3 devices would not answer.
		create: api.NetworkCreate{Name: NetworkName(req.NetworkID), Masquerade: &masq, Device: "veth"},
		rec: store.DockerNetwork{
			ID: req.NetworkID, Network: NetworkName(req.NetworkID), ICC: true, IfPrefix: "eth",
			Options: map[string]string{}, Created: time.Now().UTC(),
		},
	}
	var (
		err      error
		isolated *bool                 // -o xlane.isolated
		gwModes  = map[string]string{} // gateway_mode_ipv4/6
	)
	if c.rec.EnableIPv6, err = boolOption(req.Options, optEnableIPv6); err != nil {
		return nil, err
	}
	if c.rec.Internal, err = boolOption(req.Options, optInternal); err != nil {
		return nil, err
	}
	c.create.Internal = c.rec.Internal
	if err := c.addPools("IPv4", req.IPv4Data); err != nil {
		return nil, err
	}
	if len(req.IPv4Data) == 0 {
		return nil, errors.New("Docker sent no IPv4 subnet; xlane networks need one (use Docker's default IPAM driver)")
	}
	if len(req.IPv6Data) > 0 && !c.rec.EnableIPv6 {
		return nil, errors.New("Docker sent an IPv6 subnet for a network without IPv6 enabled")
	}
	if err := c.addPools("IPv6", req.IPv6Data); err != nil {
		return nil, err
	}
	if c.rec.EnableIPv6 && len(req.IPv6Data) == 0 {
		return nil, errors.New("IPv6 is enabled but Docker sent no IPv6 subnet; give one with --subnet")
	}

	generic, err := genericOptions(req.Options)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(generic))
	for k := range generic {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := generic[k]
		c.rec.Options[k] = v
		switch {
		case k == optMTU:
			mtu, err := strconv.Atoi(v)
			if err != nil || mtu <= 0 {
				return nil, fmt.Errorf("option %s=%q: want a positive number of bytes", k, v)
			}
			c.create.MTU = mtu
		case k == optMasquerade:
			masq, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("option %s=%q: want true or false", k, v)
			}
			c.create.Masquerade = &masq
		case k == optICC:
			icc, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("option %s=%q: want true or false", k, v)
			}
			c.rec.ICC = icc
			c.create.ICC = &icc
		case k == optGatewayMode4 || k == optGatewayMode6:
			switch v {
			case "nat", "nat-unprotected", "routed", "isolated":
				gwModes[k] = v
			default:
				return nil, fmt.Errorf("option %s=%q: want nat, nat-unprotected, routed or isolated", k, v)
			}
		case k == optHostBinding:
			a, err := netip.ParseAddr(v)
			if err != nil {
				return nil, fmt.Errorf("option %s=%q: want an address", k, v)
			}
			_ = a // applied to each -p without a host address (ports.go)
		case k == optIsolated:
			iso, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("option %s=%q: want true or false", k, v)
			}
			isolated = &iso
		case k == optIfPrefix:
			if !ifPrefixRE.MatchString(v) {
				return nil, fmt.Errorf("option %s=%q: want 1-10 lowercase letters and digits, starting with a letter", k, v)
			}
			c.rec.IfPrefix = v
		case k == optMode:
			m, err := model.ParseMode(v)
			if err != nil {
				return nil, fmt.Errorf("option %s=%q: unknown mode (want one of %s)", k, v, modeList())
			}
			c.create.Mode = string(m)
		case strings.HasPrefix(k, xlaneOptPrefix):
			return nil, fmt.Errorf("option %s: unknown xlane option (xlane knows %s and %s)", k, optMode, optIsolated)
		case bridgeOptions[k] != "":
			log.Info("docker: bridge option ignored", "network", short(req.NetworkID), "option", k, "value", v, "why", bridgeOptions[k])
		default:
			log.Warn("docker: unknown option ignored", "network", short(req.NetworkID), "option", k, "value", v)
		}
	}
	if err := c.gatewayModes(gwModes); err != nil {
		return nil, err
	}
	// Kept apart from other networks, as Docker keeps bridge networks
	// (DOCKER-ISOLATION), unless -o xlane.isolated=false; kernel mode has
	// no datapath for it, so a network asked for in kernel mode is not
	// isolated unless the option says so (and is then refused).
	c.create.Isolated = c.create.Mode != string(model.ModeKernel)
	if isolated != nil {
		c.create.Isolated = *isolated
	}
	return c, nil
}

// gatewayModes applies Docker's gateway_mode_ipv4/6 (Docker 28's bridge):
//
//	nat              xlane's default: masquerade, and from off the node
//	                 only replies and published ports get in
//	nat-unprotected  any flow from off the node gets in (either family's
//	                 opens the network: xlane's setting is per network)
//	routed           no masquerade: the containers' addresses leave the
//	                 node as they are (per network: every family the
//	                 network has must be routed, or none)
//	isolated         an internal network's containers get no gateway of
//	                 that family (Join); refused without --internal, as
//	                 Docker refuses it
func (c *networkConfig) gatewayModes(modes map[string]string) error {
	families := []string{optGatewayMode4}
	if c.rec.EnableIPv6 {
		families = append(families, optGatewayMode6)
	}
	if modes[optGatewayMode4] == "nat-unprotected" || modes[optGatewayMode6] == "nat-unprotected" {
		c.create.AllowUnsolicited = true
	}
	routed := 0
	for _, k := range families {
		switch modes[k] {
		case "routed":
			routed++
		case "isolated":
			if !c.rec.Internal {
				return fmt.Errorf("option %s=isolated: only for an internal network (--internal), as on Docker's bridge", k)
			}
		}
	}
	if modes[optGatewayMode6] == "isolated" && !c.rec.Internal {
		return fmt.Errorf("option %s=isolated: only for an internal network (--internal), as on Docker's bridge", optGatewayMode6)
	}
	switch {
	case routed == len(families):
		if c.create.Masquerade != nil && *c.create.Masquerade && c.rec.Options[optMasquerade] != "" {
			return fmt.Errorf("option %s=true contradicts gateway mode routed (no masquerade)", optMasquerade)
		}
		off := false
		c.create.Masquerade = &off
	case routed > 0:
		return fmt.Errorf("options %s=%s, %s=%s: xlane masquerades a network's families together; give routed for both or for neither",
			optGatewayMode4, or(modes[optGatewayMode4], "nat"), optGatewayMode6, or(modes[optGatewayMode6], "nat"))
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func modeList() string {
	var s []string
	for _, m := range model.Modes {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

// addPools takes Docker's IPAM data for one family: one pool, one gateway.
func (c *networkConfig) addPools(family string, data []ipamData) error {
	if len(data) > 1 {
		var pools []string
		for _, d := range data {
			pools = append(pools, d.Pool)
		}
		return fmt.Errorf("an xlane network takes one %s subnet; Docker sent %d (%s)", family, len(data), strings.Join(pools, ", "))
	}
	for _, d := range data {
		p, err := netip.ParsePrefix(d.Pool)
		if err != nil {
			return fmt.Errorf("%s subnet %q from Docker's IPAM: not a CIDR prefix", family, d.Pool)
		}
		if p.Bits() == 0 {
			return fmt.Errorf("%s subnet %s from Docker's IPAM: xlane needs a real subnet (the null IPAM driver gives none)", family, p)
		}
		c.create.Subnets = append(c.create.Subnets, p.String())
		if d.Gateway == "" {
			continue
		}
		gw, err := netip.ParsePrefix(d.Gateway)
		if err != nil {
			a, aerr := netip.ParseAddr(d.Gateway)
			if aerr != nil {
				return fmt.Errorf("%s gateway %q from Docker's IPAM: not an address", family, d.Gateway)
			}
			gw = netip.PrefixFrom(a, p.Bits())
		}
		c.create.Gateways = append(c.create.Gateways, gw.Addr().String())
	}
	return nil
}

func boolOption(opts map[string]any, key string) (bool, error) {
	switch v := opts[key].(type) {
	case nil:
		return false, nil
	case bool:
		return v, nil
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("option %s=%q: want true or false", key, v)
		}
		return b, nil
	default:
		return false, fmt.Errorf("option %s: want true or false, Docker sent %v", key, v)
	}
}

// genericOptions returns the `-o key=value` options as strings.
func genericOptions(opts map[string]any) (map[string]string, error) {
	out := map[string]string{}
	switch g := opts[optGeneric].(type) {
	case nil:
	case map[string]any:
		for k, v := range g {
			switch v := v.(type) {
			case string:
				out[k] = v
			default:
				out[k] = fmt.Sprint(v)
			}
		}
	default:
		return nil, fmt.Errorf("option %s: want an object, Docker sent %T", optGeneric, g)
	}
	return out, nil
}

func (dr *Driver) createNetwork(req *createNetworkRequest) (*empty, error) {
	c, err := parseNetwork(req, dr.log)
	if err != nil {
		return nil, fmt.Errorf("cannot create network %s: %w", short(req.NetworkID), err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	// A retry (or a Docker that lost its answer) finds the network there:
	// the same subnets make it the same network.
	created := true
	if _, err := dr.d.CreateNetwork(c.create); err != nil {
		have, herr := dr.d.Network(c.create.Name)
		if herr != nil || !sameSubnets(have.Subnets, c.create.Subnets) || have.Internal != c.create.Internal ||
			have.ICCOff != !c.rec.ICC || have.Isolated != c.create.Isolated {
			var fe *model.FieldError
			if errors.As(err, &fe) {
				switch fe.Field {
				case "masquerade":
					err = fmt.Errorf("outbound masquerade (on by default, as on Docker's bridge; off with -o %s=false): %s", optMasquerade, fe.Reason)
				case "icc":
					err = fmt.Errorf("option %s=false: %s", optICC, fe.Reason)
				case "isolated":
					err = fmt.Errorf("isolation from other networks (on by default, as between Docker's bridge networks; off with -o %s=false): %s", optIsolated, fe.Reason)
				}
			}
			return nil, fmt.Errorf("cannot create network %s: %w", short(req.NetworkID), err)
		}
		created = false
	}
	err = dr.d.Store().Update(func(tx *store.Tx) error { return tx.PutDockerNetwork(&c.rec) })
	if err != nil {
		if created {
			if derr := dr.d.DeleteNetwork(c.create.Name, true); derr != nil {
				dr.log.Error("docker: roll back network", "network", c.create.Name, "err", derr)
			}
		}
		return nil, fmt.Errorf("cannot create network %s: record it: %w", short(req.NetworkID), err)
	}
	if err := dr.allowForwarding(); err != nil {
		dr.log.Warn("docker: "+err.Error()+"; traffic Linux forwards for this network may be dropped by Docker's firewall", "docker_network", short(req.NetworkID))
	}
	dr.log.Info("docker: network created", "docker_network", short(req.NetworkID), "network", c.create.Name,
		"subnets", c.create.Subnets, "internal", c.rec.Internal, "icc", c.rec.ICC, "isolated", c.create.Isolated)
	return &empty{}, nil
}

func sameSubnets(have []netip.Prefix, want []string) bool {
	if len(have) != len(want) {
		return false
	}
	for i, p := range have {
		if p.String() != want[i] {
			return false
		}
	}
	return true
}

func (dr *Driver) deleteNetwork(req *networkRequest) (*empty, error) {
	if err := checkID("network", req.NetworkID); err != nil {
		return nil, fmt.Errorf("cannot delete network: %w", err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	// Docker removed every endpoint it knows first; any left are stale.
	if err := dr.d.DeleteNetwork(NetworkName(req.NetworkID), true); err != nil {
		return nil, fmt.Errorf("cannot delete network %s: %w", short(req.NetworkID), err)
	}
	last := false
	err := dr.d.Store().Update(func(tx *store.Tx) error {
		eps, err := tx.DockerEndpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			if e.NetworkID == req.NetworkID {
				if err := tx.DeleteDockerEndpoint(e.ID); err != nil {
					return err
				}
			}
		}
		if err := tx.DeleteDockerNetwork(req.NetworkID); err != nil {
			return err
		}
		left, err := tx.DockerNetworks()
		last = len(left) == 0
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cannot delete network %s: %w", short(req.NetworkID), err)
	}
	if last {
		if err := dr.disallowForwarding(); err != nil {
			dr.log.Warn("docker: remove forwarding rules", "err", err)
		}
	}
	dr.log.Info("docker: network deleted", "docker_network", short(req.NetworkID))
	return &empty{}, nil
}

// network returns the driver's record of a Docker network and the xlane
// network behind it.
func (dr *Driver) network(id string) (*store.DockerNetwork, *api.NetworkInfo, error) {
	if err := checkID("network", id); err != nil {
		return nil, nil, err
	}
	var rec *store.DockerNetwork
	err := dr.d.Store().View(func(tx *store.Tx) error {
		var err error
		rec, err = tx.DockerNetwork(id)
		return err
	})
	if errors.Is(err, model.ErrNotFound) {
		return nil, nil, fmt.Errorf("network %s is not known to this xlaned (was it created with another state file?)", short(id))
	}
	if err != nil {
		return nil, nil, err
	}
	n, err := dr.d.Network(rec.Network)
	if errors.Is(err, model.ErrNotFound) {
		return nil, nil, fmt.Errorf("network %s: its xlane network %s is gone (removed with the xlane CLI?); remove the Docker network and create it again", short(id), rec.Network)
	}
	if err != nil {
		return nil, nil, err
	}
	return rec, n, nil
}

// ---- endpoints ----

func (dr *Driver) createEndpoint(req *createEndpointRequest) (*createEndpointResponse, error) {
	fail := func(err error) (*createEndpointResponse, error) {
		return nil, fmt.Errorf("cannot create endpoint %s: %w", short(req.EndpointID), err)
	}
	if err := checkID("endpoint", req.EndpointID); err != nil {
		return fail(err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	_, n, err := dr.network(req.NetworkID)
	if err != nil {
		return fail(err)
	}
	add := api.EndpointAdd{ID: req.EndpointID, Network: n.Name, VethOnly: true}
	for k, v := range req.Options {
		if key, ok := strings.CutPrefix(k, OptLabel); ok {
			s, isString := v.(string)
			if !isString {
				return fail(model.Fieldf("driver-opt "+k, "%v: want a string", v))
			}
			if add.Labels == nil {
				add.Labels = map[string]string{}
			}
			add.Labels[key] = s
		}
	}
	addrsGiven, macGiven := false, false
	if i := req.Interface; i != nil {
		for _, s := range []string{i.Address, i.AddressIPv6} {
			if s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return fail(fmt.Errorf("address %q from Docker: not a CIDR address", s))
			}
			add.IPs = append(add.IPs, p.Addr().String())
			addrsGiven = true
		}
		if i.MacAddress != "" {
			add.MAC = i.MacAddress
			macGiven = true
		}
	}
	e, err := dr.d.AddEndpoint(add)
	if err != nil {
		if !errors.Is(err, model.ErrConflict) {
			return fail(err)
		}
		// A retry: the endpoint exists; fine if it is the one asked for.
		have, herr := dr.d.Endpoint(req.EndpointID)
		if herr != nil || have.Network != n.Name {
			return fail(err)
		}
		e = &have.Endpoint
	}
	rec := store.DockerEndpoint{ID: req.EndpointID, NetworkID: req.NetworkID, Created: time.Now().UTC()}
	if err := dr.d.Store().Update(func(tx *store.Tx) error { return tx.PutDockerEndpoint(&rec) }); err != nil {
		if rerr := dr.d.RemoveEndpoint(e.ID); rerr != nil {
			dr.log.Error("docker: roll back endpoint", "endpoint", e.ID, "err", rerr)
		}
		return fail(err)
	}
	dr.log.Info("docker: endpoint created", "endpoint", short(e.ID), "network", n.Name, "ips", e.IPs, "host_ifname", e.HostIf)
	// libnetwork's remote driver protocol: the driver answers with what
	// Docker did not give, and must not answer what it gave (libnetwork
	// refuses to "modify" a set address or MAC). So the MAC xlane chose is
	// returned unless --mac-address gave one (docker inspect shows it as on
	// a bridge), the addresses only when Docker gave none (a null IPAM
	// driver).
	out := &endpointInterface{}
	if !macGiven {
		out.MacAddress = e.MAC
	}
	if addrsGiven {
		if out.MacAddress == "" {
			return &createEndpointResponse{}, nil
		}
		return &createEndpointResponse{Interface: out}, nil
	}
	for _, a := range e.IPs {
		for _, p := range n.Subnets {
			if p.Contains(a) && a.Is4() {
				out.Address = netip.PrefixFrom(a, p.Bits()).String()
			} else if p.Contains(a) {
				out.AddressIPv6 = netip.PrefixFrom(a, p.Bits()).String()
			}
		}
	}
	return &createEndpointResponse{Interface: out}, nil
}

func (dr *Driver) deleteEndpoint(req *endpointRequest) (*empty, error) {
	if err := checkID("endpoint", req.EndpointID); err != nil {
		return nil, fmt.Errorf("cannot delete endpoint: %w", err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.stopProxies(req.EndpointID)
	if err := dr.d.RemoveEndpoint(req.EndpointID); err != nil {
		return nil, fmt.Errorf("cannot delete endpoint %s: %w", short(req.EndpointID), err)
	}
	err := dr.d.Store().Update(func(tx *store.Tx) error { return tx.DeleteDockerEndpoint(req.EndpointID) })
	if err != nil {
		return nil, fmt.Errorf("cannot delete endpoint %s: %w", short(req.EndpointID), err)
	}
	dr.log.Info("docker: endpoint deleted", "endpoint", short(req.EndpointID))
	return &empty{}, nil
}

// endpoint returns an endpoint of a Docker network.
func (dr *Driver) endpoint(nid, eid string) (*store.DockerNetwork, *api.NetworkInfo, *api.EndpointInfo, error) {
	if err := checkID("endpoint", eid); err != nil {
		return nil, nil, nil, err
	}
	rec, n, err := dr.network(nid)
	if err != nil {
		return nil, nil, nil, err
	}
	e, err := dr.d.Endpoint(eid)
	if errors.Is(err, model.ErrNotFound) {
		return nil, nil, nil, fmt.Errorf("endpoint %s is not known to this xlaned", short(eid))
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if e.Network != n.Name {
		return nil, nil, nil, fmt.Errorf("endpoint %s belongs to xlane network %s, not to %s", short(eid), e.Network, n.Name)
	}
	return rec, n, e, nil
}

func (dr *Driver) endpointOperInfo(req *endpointRequest) (*endpointInfoResponse, error) {
	_, n, e, err := dr.endpoint(req.NetworkID, req.EndpointID)
	if err != nil {
		return nil, fmt.Errorf("cannot describe endpoint %s: %w", short(req.EndpointID), err)
	}
	return &endpointInfoResponse{Value: map[string]string{
		"com.docker.network.endpoint.macaddress": e.MAC,
		"xlane.network":                          n.Name,
		"xlane.mode":                             string(n.Mode),
		"xlane.host_ifname":                      e.HostIf,
		"xlane.state":                            e.State,
	}}, nil
}

func (dr *Driver) join(req *joinRequest) (*joinResponse, error) {
	fail := func(err error) (*joinResponse, error) {
		return nil, fmt.Errorf("cannot attach endpoint %s: %w", short(req.EndpointID), err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	rec, n, e, err := dr.endpoint(req.NetworkID, req.EndpointID)
	if err != nil {
		return fail(err)
	}
	if !dr.peerOnNode(e.PeerIf) {
		return fail(fmt.Errorf("its interface %s is not on the node (already in a container?)", e.PeerIf))
	}
	// Internal networks get their gateway too, as from Docker 20.10's
	// bridge: the policy rules (netconf/internal.go) let it reach only the
	// node, and refuse the rest at once. gateway_mode isolated withholds
	// it (Docker 25+ gives an internal bridge network no gateway at all).
	resp := &joinResponse{InterfaceName: interfaceName{SrcName: e.PeerIf, DstPrefix: rec.IfPrefix}}
	if _, gw, ok := n.Subnet4(); ok && rec.Options[optGatewayMode4] != "isolated" {
		resp.Gateway = gw.String()
	}
	if p, gw, ok := n.Subnet6(); ok && hasV6(e.IPs) {
		if rec.Options[optGatewayMode6] != "isolated" {
			resp.GatewayIPv6 = gw.String()
		}
		resp.StaticRoutes = onLinkV6Routes(p, gw)
	}
	err = dr.d.Store().Update(func(tx *store.Tx) error {
		de, err := tx.DockerEndpoint(req.EndpointID)
		if errors.Is(err, model.ErrNotFound) {
			de = &store.DockerEndpoint{ID: req.EndpointID, NetworkID: req.NetworkID, Created: time.Now().UTC()}
		} else if err != nil {
			return err
		}
		de.SandboxKey = req.SandboxKey
		return tx.PutDockerEndpoint(de)
	})
	if err != nil {
		return fail(err)
	}
	dr.log.Info("docker: endpoint joined", "endpoint", short(req.EndpointID), "sandbox", req.SandboxKey, "ifname", e.PeerIf)
	return resp, nil
}

func hasV6(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if a.Is6() {
			return true
		}
	}
	return false
}

// onLinkV6Routes keeps IPv6 traffic between containers off neighbour
// discovery. Docker gives the container the subnet on-link; IPv4 copes
// (the host veth answers ARP for every address by proxy ARP), but Linux
// proxies ND only per address and interface. So the container reaches its
// peers through the gateway instead: the two halves of the subnet, being
// longer than the on-link prefix, win over it, and the gateway itself is
// on-link (the host veth answers ND for that one address). The gateway
// route comes first: Linux refuses a next hop it can only reach through
// another gateway route, and the first half contains the gateway.
func onLinkV6Routes(p netip.Prefix, gw netip.Addr) []staticRoute {
	if p.Bits() >= 128 {
		return nil
	}
	lo := p.Masked().Addr().As16()
	hi := lo
	hi[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	return []staticRoute{
		{Destination: netip.PrefixFrom(gw, 128).String(), RouteType: routeConnected},
		{Destination: netip.PrefixFrom(netip.AddrFrom16(lo), p.Bits()+1).String(), RouteType: routeNextHop, NextHop: gw.String()},
		{Destination: netip.PrefixFrom(netip.AddrFrom16(hi), p.Bits()+1).String(), RouteType: routeNextHop, NextHop: gw.String()},
	}
}

func (dr *Driver) leave(req *endpointRequest) (*empty, error) {
	if err := checkID("endpoint", req.EndpointID); err != nil {
		return nil, fmt.Errorf("cannot detach endpoint: %w", err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	err := dr.d.Store().Update(func(tx *store.Tx) error {
		de, err := tx.DockerEndpoint(req.EndpointID)
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		de.SandboxKey = ""
		return tx.PutDockerEndpoint(de)
	})
	if err != nil {
		return nil, fmt.Errorf("cannot detach endpoint %s: %w", short(req.EndpointID), err)
	}
	dr.log.Info("docker: endpoint left", "endpoint", short(req.EndpointID))
	return &empty{}, nil
}

func (dr *Driver) programExternalConnectivity(req *externalConnectivityRequest) (*empty, error) {
	fail := func(err error) (*empty, error) {
		return nil, fmt.Errorf("cannot publish ports of endpoint %s: %w", short(req.EndpointID), err)
	}
	if err := checkID("endpoint", req.EndpointID); err != nil {
		return fail(err)
	}
	exposed, _ := json.Marshal(req.Options[optExposedPorts])
	dr.mu.Lock()
	defer dr.mu.Unlock()
	var prev *store.DockerEndpoint
	err := dr.d.Store().View(func(tx *store.Tx) error {
		de, err := tx.DockerEndpoint(req.EndpointID)
		if err == nil {
			prev = de
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	// The network's default host address for -p without one
	// (host_binding_ipv4, as on a bridge).
	var defHost netip.Addr
	if prev != nil {
		if rec, _, err := dr.network(prev.NetworkID); err == nil {
			defHost, _ = netip.ParseAddr(rec.Options[optHostBinding])
		}
	}
	b, err := dr.portBindings(req.EndpointID, req.Options[optPortMap], prev, defHost)
	if err != nil {
		return fail(err)
	}
	ports := b.Ports
	if len(ports) > 0 {
		if _, err := dr.d.PublishPorts(req.EndpointID, api.PortsUpdate{Ports: ports}, false); err != nil {
			return fail(err)
		}
	}
	if len(ports)+len(b.Relays) > 0 {
		if err := dr.proxyPorts(req.EndpointID, ports, b.Relays); err != nil {
			if len(ports) > 0 {
				if _, werr := dr.d.PublishPorts(req.EndpointID, api.PortsUpdate{Ports: ports}, true); werr != nil {
					dr.log.Error("docker: roll back published ports", "endpoint", short(req.EndpointID), "err", werr)
				}
			}
			return fail(err)
		}
	}
	err = dr.d.Store().Update(func(tx *store.Tx) error {
		de, err := tx.DockerEndpoint(req.EndpointID)
		if errors.Is(err, model.ErrNotFound) {
			de = &store.DockerEndpoint{ID: req.EndpointID, NetworkID: req.NetworkID, Created: time.Now().UTC()}
		} else if err != nil {
			return err
		}
		de.ExposedPorts = nil
		if string(exposed) != "null" {
			de.ExposedPorts = exposed
		}
		de.Ports = ports
		de.Relays = b.Relays
		return tx.PutDockerEndpoint(de)
	})
	if err != nil {
		dr.stopProxies(req.EndpointID)
		if len(ports) > 0 {
			if _, werr := dr.d.PublishPorts(req.EndpointID, api.PortsUpdate{Ports: ports}, true); werr != nil {
				dr.log.Error("docker: roll back published ports", "endpoint", short(req.EndpointID), "err", werr)
			}
		}
		return fail(err)
	}
	// A mapping Docker no longer asks for (a repeated call with other
	// ports) is withdrawn; its relay stopped with the others above.
	if prev != nil {
		var stale []string
		for _, s := range prev.Ports {
			if !slices.Contains(ports, s) {
				stale = append(stale, s)
			}
		}
		if len(stale) > 0 {
			if _, err := dr.d.PublishPorts(req.EndpointID, api.PortsUpdate{Ports: stale}, true); err != nil && !errors.Is(err, model.ErrNotFound) {
				dr.log.Warn("docker: withdraw ports Docker no longer publishes", "endpoint", short(req.EndpointID), "ports", stale, "err", err)
			}
		}
	}
	if len(ports)+len(b.Relays) > 0 {
		// The host ports xlane chose (-p PORT, -P) are here and in
		// xlane endpoint inspect: Docker reads no port map from a
		// remote driver (docs/docker.md).
		dr.log.Info("docker: ports published", "endpoint", short(req.EndpointID), "ports", ports, "relayed_on_one_address", b.Relays)
	}
	return &empty{}, nil
}

func (dr *Driver) revokeExternalConnectivity(req *externalConnectivityRequest) (*empty, error) {
	if err := checkID("endpoint", req.EndpointID); err != nil {
		return nil, fmt.Errorf("cannot withdraw ports: %w", err)
	}
	dr.mu.Lock()
	defer dr.mu.Unlock()
	fail := func(err error) (*empty, error) {
		return nil, fmt.Errorf("cannot withdraw ports of endpoint %s: %w", short(req.EndpointID), err)
	}
	dr.stopProxies(req.EndpointID)
	var de *store.DockerEndpoint
	err := dr.d.Store().View(func(tx *store.Tx) error {
		var err error
		de, err = tx.DockerEndpoint(req.EndpointID)
		return err
	})
	if errors.Is(err, model.ErrNotFound) || err == nil && len(de.Ports)+len(de.Relays) == 0 {
		return &empty{}, nil
	}
	if err != nil {
		return fail(err)
	}
	// The daemon runs its own store transaction: not inside ours.
	if len(de.Ports) > 0 {
		if _, err := dr.d.PublishPorts(req.EndpointID, api.PortsUpdate{Ports: de.Ports}, true); err != nil && !errors.Is(err, model.ErrNotFound) {
			return fail(err)
		}
	}
	de.Ports, de.Relays = nil, nil
	if err := dr.d.Store().Update(func(tx *store.Tx) error { return tx.PutDockerEndpoint(de) }); err != nil {
		return fail(err)
	}
	dr.log.Info("docker: ports withdrawn", "endpoint", short(req.EndpointID))
	return &empty{}, nil
}

// proxyPorts starts the node-local relays of an endpoint's published
// ports (on every address) and of its relayed ones (on one address each;
// see proxy.go, proxy_udp.go); all or none.
func (dr *Driver) proxyPorts(id string, ports, relays []string) error {
	e, err := dr.d.Endpoint(id)
	if err != nil {
		return err
	}
	if len(e.IPs) == 0 {
		return fmt.Errorf("endpoint %s has no address", short(id))
	}
	target := e.IPs[0] // IPv4 first when there is one
	for _, a := range e.IPs {
		if a.Is4() {
			target = a
			break
		}
	}
	dr.stopProxies(id)
	var started []stopper
	start := func(proto, listen string, port uint16) error {
		p, err := dr.startProxy(proto, listen, netip.AddrPortFrom(target, port))
		if err != nil {
			for _, p := range started {
				p.stop()
			}
			return err
		}
		started = append(started, p)
		return nil
	}
	for _, s := range ports {
		pm, err := model.ParsePortMapping(s)
		if err != nil {
			return err
		}
		if err := start(pm.Proto, fmt.Sprintf(":%d", pm.NodePort), pm.Port); err != nil {
			return err
		}
	}
	for _, s := range relays {
		host, port, proto, err := parseRelay(s)
		if err != nil {
			return err
		}
		if err := start(proto, host.String(), port); err != nil {
			return err
		}
	}
	dr.proxies[id] = started
	return nil
}

func (dr *Driver) stopProxies(id string) {
	for _, p := range dr.proxies[id] {
		p.stop()
	}
	delete(dr.proxies, id)
}
