package docker

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// How Docker's -p forms become xlane's:
//
//	-p 8080:80, -p 0.0.0.0:8080:80, -p [::]:8080:80
//	    published: the datapath DNATs 8080 on the uplink's addresses (from
//	    off the node, from containers, from the node's own sockets), and a
//	    relay holds 8080 on every node address (proxy.go, proxy_udp.go)
//	-p 127.0.0.1:8082:80, -p [::1]:8083:80, -p 10.0.0.5:8084:80[/udp]
//	    on that address only: a relay listening there and nothing in the
//	    datapath (as docker-proxy relays a bridge's port; the container
//	    sees the relay's connection, from the node)
//	-p 80, -P, -p 127.0.0.1::80
//	    Docker leaves the host port to the driver: xlane takes a free one of
//	    ephemeralPorts (below the node's ip_local_port_range)
//	-p 8080-8090:80
//	    the first free port of the range, as the bridge does

// portBinding is one of Docker's port mappings (libnetwork types.PortBinding).
type portBinding struct {
	Proto       int    // IP protocol number
	IP          string // container address (unused: the endpoint's)
	Port        int    // container port
	HostIP      string
	HostPort    int
	HostPortEnd int
}

// bindings is what xlane makes of Docker's port map: Ports are published
// (xlane's NODEPORT:PORT/PROTO), Relays are relayed on one host address
// only (HOSTIP:HOSTPORT:PORT/PROTO, IPv6 in brackets).
type bindings struct {
	Ports  []string
	Relays []string
}

func decodePortMap(raw any) ([]portBinding, error) {
	if raw == nil {
		return nil, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var pbs []portBinding
	if err := json.Unmarshal(b, &pbs); err != nil {
		return nil, fmt.Errorf("port map from Docker: %w", err)
	}
	return pbs, nil
}

// hostAddr is a binding's host address; invalid for "every address".
func hostAddr(pb portBinding) (netip.Addr, error) {
	switch pb.HostIP {
	case "", "0.0.0.0", "::":
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(pb.HostIP)
	if err != nil {
		return a, fmt.Errorf("port %d: host address %q from Docker: not an address", pb.Port, pb.HostIP)
	}
	return a.Unmap(), nil
}

// relaySpec is a relay's record: HOSTIP:HOSTPORT:PORT/PROTO.
func relaySpec(host netip.AddrPort, port int, proto string) string {
	return fmt.Sprintf("%s:%d/%s", host, port, proto)
}

// parseRelay reads a relaySpec.
func parseRelay(s string) (host netip.AddrPort, port uint16, proto string, err error) {
	bad := fmt.Errorf("relay %q: want HOSTIP:HOSTPORT:PORT/tcp|udp", s)
	spec, proto, ok := strings.Cut(s, "/")
	i := strings.LastIndex(spec, ":")
	if !ok || (proto != "tcp" && proto != "udp") || i < 0 {
		return host, 0, "", bad
	}
	host, err = netip.ParseAddrPort(spec[:i])
	p, perr := strconv.ParseUint(spec[i+1:], 10, 16)
	if err != nil || perr != nil || p == 0 {
		return host, 0, "", bad
	}
	return host, uint16(p), proto, nil
}

// portBindings turns Docker's port map for endpoint id into bindings,
// choosing the host ports Docker left to the driver. prev (may be nil) is
// the endpoint's record: a port chosen before is kept (Docker calls again
// after a restart). defHost is the network's host_binding_ipv4: the host
// address of a binding that names none, as on a bridge.
func (dr *Driver) portBindings(id string, raw any, prev *store.DockerEndpoint, defHost netip.Addr) (bindings, error) {
	var out bindings
	pbs, err := decodePortMap(raw)
	if err != nil {
		return out, err
	}
	taken, err := dr.publishedElsewhere(id)
	if err != nil {
		return out, err
	}
	for _, pb := range pbs {
		proto := map[int]string{6: "tcp", 17: "udp"}[pb.Proto]
		if proto == "" {
			return out, fmt.Errorf("port %d: xlane publishes tcp and udp ports only (protocol %d)", pb.Port, pb.Proto)
		}
		host, err := hostAddr(pb)
		if err != nil {
			return out, err
		}
		if pb.HostIP == "" && defHost.IsValid() && !defHost.IsUnspecified() {
			host = defHost.Unmap()
		}
		lo, hi := pb.HostPort, pb.HostPortEnd
		if hi < lo {
			hi = lo
		}
		if lo < 0 || hi > 65535 {
			return out, fmt.Errorf("port %d: host ports %d-%d out of 1-65535", pb.Port, lo, hi)
		}
		// A port xlane chose before (this call: Docker's binding of the
		// other family; the record: a repeated call) is kept, if the
		// binding leaves the choice to xlane.
		keep := func(hp int, found bool) bool {
			return found && (lo == 0 || lo != hi && hp >= lo && hp <= hi)
		}
		if host.IsValid() {
			if s, hp, ok := sameRelay(out.Relays, prev, host, proto, pb.Port); keep(hp, ok) {
				if !slices.Contains(out.Relays, s) {
					out.Relays = append(out.Relays, s)
				}
				continue
			}
		} else if s, hp, ok := samePort(out.Ports, prev, proto, pb.Port); keep(hp, ok) {
			if !slices.Contains(out.Ports, s) {
				out.Ports = append(out.Ports, s)
			}
			continue
		}
		free := func(p int) bool {
			if !host.IsValid() && taken[fmt.Sprintf("%d/%s", p, proto)] {
				return false
			}
			return bindable(host, p, proto)
		}
		p, err := choosePort(lo, hi, free)
		if err != nil {
			return out, fmt.Errorf("port %d/%s: %w", pb.Port, proto, err)
		}
		spec, list := fmt.Sprintf("%d:%d/%s", p, pb.Port, proto), &out.Ports
		if host.IsValid() {
			spec, list = relaySpec(netip.AddrPortFrom(host, uint16(p)), pb.Port, proto), &out.Relays
		}
		if !slices.Contains(*list, spec) { // Docker may list a binding per address family
			*list = append(*list, spec)
		}
	}
	return out, nil
}

// samePort finds a published port of container port port/proto in have
// (this call's) or prev (the record's), for Docker's second binding of
// one mapping (IPv6) and for a repeated call.
func samePort(have []string, prev *store.DockerEndpoint, proto string, port int) (string, int, bool) {
	all := have
	if prev != nil {
		all = append(slices.Clone(have), prev.Ports...)
	}
	for _, s := range all {
		pm, err := model.ParsePortMapping(s)
		if err == nil && pm.Proto == proto && int(pm.Port) == port {
			return s, int(pm.NodePort), true
		}
	}
	return "", 0, false
}

// sameRelay is samePort for relays on host.
func sameRelay(have []string, prev *store.DockerEndpoint, host netip.Addr, proto string, port int) (string, int, bool) {
	all := have
	if prev != nil {
		all = append(slices.Clone(have), prev.Relays...)
	}
	for _, s := range all {
		h, p, pr, err := parseRelay(s)
		if err == nil && h.Addr() == host && pr == proto && int(p) == port {
			return s, int(h.Port()), true
		}
	}
	return "", 0, false
}

// publishedElsewhere lists NODEPORT/PROTO published by xlane endpoints
// other than id.
func (dr *Driver) publishedElsewhere(id string) (map[string]bool, error) {
	taken := map[string]bool{}
	err := dr.d.Store().View(func(tx *store.Tx) error {
		eps, err := tx.Endpoints()
		if err != nil {
			return err
		}
		for _, e := range eps {
			if e.ID == id {
				continue
			}
			for _, pm := range e.Ports {
				taken[fmt.Sprintf("%d/%s", pm.NodePort, pm.Proto)] = true
			}
		}
		return nil
	})
	return taken, err
}

// choosePort returns lo when lo == hi and lo != 0 (a port given: its
// conflicts are reported where it is published or relayed), else the first
// free port of [lo, hi], or a free one of ephemeralPorts for lo == 0.
func choosePort(lo, hi int, free func(int) bool) (int, error) {
	if lo != 0 && lo == hi {
		return lo, nil
	}
	if lo != 0 {
		for p := lo; p <= hi; p++ {
			if free(p) {
				return p, nil
			}
		}
		return 0, fmt.Errorf("no free host port in %d-%d", lo, hi)
	}
	elo, ehi := ephemeralPorts()
	n := ehi - elo + 1
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		if p := elo + (start+i)%n; free(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free host port in %d-%d (xlane's choice for -p PORT and -P)", elo, ehi)
}

// ephemeralSpan is how many ports ephemeralPorts offers.
const ephemeralSpan = 4096

// ephemeralPorts is where xlane chooses host ports for -p PORT and -P: the
// 4096 ports just below the node's ip_local_port_range (28672-32767 under
// Linux's default 32768-60999). A published port inside that range could be
// the local port of one of the node's own connections, whose replies the
// datapath would then hand to the container; masquerade's ports
// (--nat-ports) lie above it by default.
func ephemeralPorts() (lo, hi int) {
	first := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024 {
				first = v
			}
		}
	}
	lo = max(first-ephemeralSpan, 1024)
	return lo, first - 1
}

// bindable says whether the node could bind host:port (every address for
// an invalid host) for proto right now.
func bindable(host netip.Addr, port int, proto string) bool {
	addr := ":" + strconv.Itoa(port)
	if host.IsValid() {
		addr = net.JoinHostPort(host.String(), strconv.Itoa(port))
	}
	if proto == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
