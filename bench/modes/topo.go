package main

// Network-namespace plumbing and the three topologies under test. Every
// topology builds its own "node" namespace and two "container" namespaces
// and records an undo step for everything it creates, so Teardown removes
// exactly what a (possibly partial) Setup made.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// Topology is one way of connecting two containers on a node.
type Topology interface {
	Name() string
	// Describe says in one line how the containers are connected.
	Describe() string
	// Setup builds the node, the containers and one network per MTU.
	Setup(ctx context.Context) error
	// Teardown removes whatever Setup created, even after a failed Setup.
	Teardown() error
	// Pair returns the containers on the network with this MTU, by their
	// IPv4 addresses; Pair6 by their IPv6 addresses.
	Pair(mtu int) harness.Pair
	Pair6(mtu int) harness.Pair
	// Notes reports facts about the topology worth printing next to the
	// numbers (e.g. whether bridged traffic went through iptables).
	Notes(ctx context.Context) []string
	// Defer adds a teardown step that runs before the topology's own.
	Defer(what string, fn func(ctx context.Context) error)
}

// base is what every topology has: a node namespace, two container
// namespaces, one network per MTU, and the undo steps.
type base struct {
	name   string
	prefix string // unique netns prefix, e.g. xlb-1a2b3c-tc
	net    int    // this topology's subnets: 10.<net>.<i>.0/24, fd00:<net>:<i>::/64
	mtus   []int
	node   string
	ctrs   [2]string // client, server
	pairs  map[int]harness.Pair
	pairs6 map[int]harness.Pair
	undo   harness.UndoStack
}

func newBase(name, runID string, net int, mtus []int) base {
	p := runID + "-" + name
	return base{
		name: name, prefix: p, net: net, mtus: mtus,
		node: p + "-node", ctrs: [2]string{p + "-c1", p + "-c2"},
		pairs: map[int]harness.Pair{}, pairs6: map[int]harness.Pair{},
	}
}

func (b *base) Name() string { return b.name }

func (b *base) Pair(mtu int) harness.Pair { return b.pairs[mtu] }

func (b *base) Pair6(mtu int) harness.Pair { return b.pairs6[mtu] }

func (b *base) Teardown() error { return b.undo.Run() }

func (b *base) Defer(what string, fn func(ctx context.Context) error) { b.undo.Push(what, fn) }

// subnet of the i-th network (one per MTU).
func (b *base) subnet(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b.net), byte(i), 0}), 24)
}

// subnet6 is subnet's IPv6 twin.
func (b *base) subnet6(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0: 0xfd, 3: byte(b.net), 5: byte(i)}), 64)
}

// pairOf returns the pair of p's containers by other addresses.
func pairOf(p harness.Pair, client, server netip.Addr) harness.Pair {
	p.ClientIP, p.ServerIP = client, server
	return p
}

// addNamespaces creates the node and container namespaces with lo up.
func (b *base) addNamespaces(ctx context.Context) error {
	return harness.AddNamespaces(ctx, &b.undo, append([]string{b.node}, b.ctrs[:]...)...)
}

func (b *base) setPair(mtu int, ips [2]netip.Addr) {
	b.pairs[mtu] = harness.Pair{Client: b.ctrs[0], Server: b.ctrs[1], ClientIP: ips[0], ServerIP: ips[1], MTU: mtu}
}

// ---- docker ----

// dockerTopo is what dockerd builds for user-defined bridge networks: per
// network a Linux bridge holding the gateway address, a veth per container
// enslaved to it, container addresses on-link in the /24 with the default
// route via the bridge, and Docker's iptables rules (so conntrack runs).
type dockerTopo struct {
	base
	brNF string // bridge-nf-call-iptables in the node netns: "1", "0" or "absent"
}

func newDocker(runID string, net int, mtus []int) *dockerTopo {
	return &dockerTopo{base: newBase("docker", runID, net, mtus)}
}

func (d *dockerTopo) Describe() string {
	return "Linux bridge + veth, Docker's iptables filter/nat rules (conntrack), bridge-nf-call-iptables=" + d.brNF
}

func (d *dockerTopo) bridge(mtu int) string { return fmt.Sprintf("br-xlb%d", mtu) }

func (d *dockerTopo) Setup(ctx context.Context) error {
	if err := d.addNamespaces(ctx); err != nil {
		return err
	}
	n := func(argv ...string) []string { return append([]string{"ip", "-n", d.node}, argv...) }
	// dockerd enables forwarding; br_netfilter (loaded by dockerd) makes
	// bridged IPv4 frames traverse iptables. The sysctl is per netns.
	for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := sysctlIn(ctx, d.node, k, "1"); err != nil {
			return err
		}
	}
	d.brNF = "absent"
	if _, err := harness.Run(ctx, harness.NSExec(d.node, "test", "-e", "/proc/sys/net/bridge/bridge-nf-call-iptables")...); err == nil {
		if err := sysctlIn(ctx, d.node, "net/bridge/bridge-nf-call-iptables", "1"); err != nil {
			return err
		}
		v, err := harness.Run(ctx, harness.NSExec(d.node, "cat", "/proc/sys/net/bridge/bridge-nf-call-iptables")...)
		if err != nil {
			return err
		}
		d.brNF = strings.TrimSpace(v)
		// Docker's IPv6 networks (--ipv6, ip6tables on by default since
		// v27) filter bridged IPv6 the same way.
		if err := sysctlIn(ctx, d.node, "net/bridge/bridge-nf-call-ip6tables", "1"); err != nil {
			return err
		}
	}
	for i, mtu := range d.mtus {
		br, pfx := d.bridge(mtu), d.subnet(i)
		gw, gw6 := pfx.Addr().Next(), d.subnet6(i).Addr().Next()
		m := fmt.Sprint(mtu)
		if err := harness.RunAll(ctx,
			n("link", "add", br, "mtu", m, "type", "bridge"),
			n("addr", "add", netip.PrefixFrom(gw, 24).String(), "dev", br),
			n("addr", "add", netip.PrefixFrom(gw6, 64).String(), "dev", br, "nodad"),
			n("link", "set", br, "up"),
		); err != nil {
			return err
		}
		var ips, ips6 [2]netip.Addr
		ifname := fmt.Sprintf("eth%d", i)
		for j, ctr := range d.ctrs {
			ips[j] = addrAdd(gw, 1+j) // .2, .3 like Docker's IPAM
			ips6[j] = addrAdd(gw6, 1+j)
			host := fmt.Sprintf("veth%d-%d", j+1, mtu)
			c := func(argv ...string) []string { return append([]string{"ip", "-n", ctr}, argv...) }
			cmds := [][]string{
				n("link", "add", host, "mtu", m, "type", "veth", "peer", "name", ifname, "mtu", m, "netns", ctr),
				n("link", "set", host, "master", br),
				n("link", "set", host, "up"),
				c("addr", "add", netip.PrefixFrom(ips[j], 24).String(), "dev", ifname),
				c("addr", "add", netip.PrefixFrom(ips6[j], 64).String(), "dev", ifname, "nodad"),
				c("link", "set", ifname, "up"),
			}
			if i == 0 { // the first network owns the default route, as in Docker
				cmds = append(cmds, c("route", "add", "default", "via", gw.String()),
					c("-6", "route", "add", "default", "via", gw6.String()))
			}
			if err := harness.RunAll(ctx, cmds...); err != nil {
				return err
			}
		}
		// The bridge takes the smallest MTU of its ports; set it again.
		if _, err := harness.Run(ctx, n("link", "set", br, "mtu", m)...); err != nil {
			return err
		}
		d.setPair(mtu, ips)
		p := d.pairs[mtu]
		p.Node, p.ClientIf, p.ServerIf = d.node, ifname, ifname
		p.ClientHostIf, p.ServerHostIf = fmt.Sprintf("veth1-%d", mtu), fmt.Sprintf("veth2-%d", mtu)
		var err error
		if p.ClientMAC, err = harness.LinkMAC(ctx, p.Client, ifname); err != nil {
			return err
		}
		// Bridged: the client reaches the server's MAC directly (L2).
		if p.NextHopMAC, err = harness.LinkMAC(ctx, p.Server, ifname); err != nil {
			return err
		}
		d.pairs[mtu] = p
		d.pairs6[mtu] = pairOf(p, ips6[0], ips6[1])
	}
	if _, err := harness.RunInput(ctx, d.iptablesRules(false), harness.NSExec(d.node, "iptables-restore")...); err != nil {
		return fmt.Errorf("install Docker's iptables rules: %w", err)
	}
	if _, err := harness.RunInput(ctx, d.iptablesRules(true), harness.NSExec(d.node, "ip6tables-restore")...); err != nil {
		return fmt.Errorf("install Docker's ip6tables rules: %w", err)
	}
	return nil
}

// iptablesRules is the ruleset dockerd (v24-v27, iptables backend) installs
// for user-defined bridge networks, in iptables-restore form; v6: the
// ip6tables twin of an --ipv6 network.
func (d *dockerTopo) iptablesRules(v6 bool) string {
	var filter, nat []string
	filter = append(filter,
		"-A FORWARD -j DOCKER-USER",
		"-A FORWARD -j DOCKER-ISOLATION-STAGE-1")
	loopback := "127.0.0.0/8"
	if v6 {
		loopback = "::1/128"
	}
	nat = append(nat,
		"-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
		"-A OUTPUT ! -d "+loopback+" -m addrtype --dst-type LOCAL -j DOCKER")
	var iso1, iso2 []string
	for i, mtu := range d.mtus {
		br, pfx := d.bridge(mtu), d.subnet(i).String()
		if v6 {
			pfx = d.subnet6(i).String()
		}
		filter = append(filter,
			"-A FORWARD -o "+br+" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
			"-A FORWARD -o "+br+" -j DOCKER",
			"-A FORWARD -i "+br+" ! -o "+br+" -j ACCEPT",
			"-A FORWARD -i "+br+" -o "+br+" -j ACCEPT")
		iso1 = append(iso1, "-A DOCKER-ISOLATION-STAGE-1 -i "+br+" ! -o "+br+" -j DOCKER-ISOLATION-STAGE-2")
		iso2 = append(iso2, "-A DOCKER-ISOLATION-STAGE-2 -o "+br+" -j DROP")
		nat = append(nat,
			"-A POSTROUTING -s "+pfx+" ! -o "+br+" -j MASQUERADE",
			"-A DOCKER -i "+br+" -j RETURN")
	}
	filter = append(filter, iso1...)
	filter = append(filter, "-A DOCKER-ISOLATION-STAGE-1 -j RETURN")
	filter = append(filter, iso2...)
	filter = append(filter, "-A DOCKER-ISOLATION-STAGE-2 -j RETURN", "-A DOCKER-USER -j RETURN")
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	b.WriteString(":DOCKER - [0:0]\n:DOCKER-ISOLATION-STAGE-1 - [0:0]\n:DOCKER-ISOLATION-STAGE-2 - [0:0]\n:DOCKER-USER - [0:0]\n")
	b.WriteString(strings.Join(filter, "\n") + "\nCOMMIT\n")
	b.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:DOCKER - [0:0]\n")
	b.WriteString(strings.Join(nat, "\n") + "\nCOMMIT\n")
	return b.String()
}

// Notes reports whether the bridged traffic went through iptables: the
// packets the FORWARD rules for the bridges matched, and conntrack's
// table size.
func (d *dockerTopo) Notes(ctx context.Context) []string {
	var notes []string
	switch d.brNF {
	case "absent":
		notes = append(notes, "docker: /proc/sys/net/bridge/bridge-nf-call-iptables is ABSENT on this kernel (no br_netfilter): "+
			"container-to-container traffic on the bridge skips iptables and conntrack, unlike real Docker; the baseline is optimistic")
	case "1":
		notes = append(notes, "docker: br_netfilter present, bridge-nf-call-iptables=1 and bridge-nf-call-ip6tables=1 in the node netns (as with dockerd): bridged IPv4 and IPv6 traverse iptables and ip6tables FORWARD")
	default:
		notes = append(notes, "docker: bridge-nf-call-iptables="+d.brNF+" in the node netns: bridged traffic skips iptables")
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err := harness.Run(ctx, harness.NSExec(d.node, tool+"-save", "-c", "-t", "filter")...)
		if err != nil {
			continue
		}
		if rules, err := measure.ParseIptablesSave(out); err == nil {
			f := measure.Forward(rules)
			notes = append(notes, fmt.Sprintf("docker: %s FORWARD saw %d packets (%s) during the run, %d of them accepted by the conntrack RELATED,ESTABLISHED rules",
				tool, f.Packets, humanBytes(f.Bytes), f.Established))
		}
	}
	if v, err := harness.Run(ctx, harness.NSExec(d.node, "cat", "/proc/sys/net/netfilter/nf_conntrack_count")...); err == nil {
		notes = append(notes, "docker: conntrack entries in the node netns at the end: "+strings.TrimSpace(v))
	}
	return notes
}

func sysctlIn(ctx context.Context, ns, key, val string) error {
	_, err := harness.Run(ctx, harness.NSExec(ns, "sh", "-c", `echo "$2" > "/proc/sys/$1"`, "sh", key, val)...)
	return err
}

// ---- xlane ----

// xlaneTopo is an xlane daemon in its own node namespace with one network
// per MTU in the given mode; the containers join each network with
// `xlane endpoint add` (eth0 on the first network, eth1 on the second).
type xlaneTopo struct {
	base
	mode    string // the network's mode
	variant string // observe.go: aa, off, metrics, monitor, monitor-all, hubble, or ""
	ref     string // observe.go: the git ref xlaned was built from (@base), or "": the work tree
	bins    string // directory with xlaned and xlane
	dir     string // state file, socket and logs
	pinDir  string
	daemon  *harness.Proc
	// observer is the xlane monitor client of the monitor variants, the
	// hubble CLI of the hubble variant.
	observer *harness.Proc
}

func newXlane(mode, runID string, net int, mtus []int, bins, tmp string) *xlaneTopo {
	netMode, variant := splitVariant(mode)
	variant = strings.TrimSuffix(variant, "@base") // the build is x.ref
	t := &xlaneTopo{base: newBase(safeName(mode), runID, net, mtus), mode: netMode, variant: variant, bins: bins}
	t.name = mode
	t.dir = filepath.Join(tmp, safeName(mode))
	t.pinDir = filepath.Join("/sys/fs/bpf", t.prefix)
	return t
}

func (x *xlaneTopo) Describe() string {
	d := fmt.Sprintf("xlane network --mode %s (daemon in its own node netns)", x.mode)
	switch x.variant {
	case "aa":
		d += ", configured as tc: the A/A control, its ratio to tc is this run's noise floor"
	case "off":
		d += ", xlaned --monitor=false: the monitor's hooks built out (observability off, the targets' reference)"
	case "metrics":
		d += ", --metrics-addr scraped every second"
	case "monitor":
		d += ", xlane monitor attached (default types)"
	case "monitor-all":
		d += ", xlane monitor -t all attached (a verdict per packet, up to --monitor-rate)"
	case "hubble":
		d += ", xlaned --hubble with the stock hubble observe --follow attached (every flow, named)"
	}
	if x.ref != "" {
		d += ", xlaned built from " + x.ref
	}
	return d
}

func (x *xlaneTopo) cli(ctx context.Context, args ...string) (string, error) {
	return harness.Xlane(ctx, x.bins, x.dir, args...)
}

func (x *xlaneTopo) netName(mtu int) string { return fmt.Sprintf("xlb%d", mtu) }

func (x *xlaneTopo) Setup(ctx context.Context) (err error) {
	if err := os.MkdirAll(x.dir, 0o700); err != nil {
		return err
	}
	if err := x.addNamespaces(ctx); err != nil {
		return err
	}
	x.daemon, err = harness.StartXlaned(ctx, &x.undo, harness.Xlaned{
		Name: "xlaned " + x.name, Netns: x.node, Bins: x.bins, Dir: x.dir, PinDir: x.pinDir, Timeout: 45 * time.Second, // a loaded machine took > 15 s
		Args: x.observeArgs(),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			err = x.startObserver(ctx)
		}
	}()
	for i, mtu := range x.mtus {
		name := x.netName(mtu)
		// MODE-bigtcp: the mode with BIG TCP on (192 KiB GSO/GRO on the
		// endpoints' veths).
		mode, big := strings.CutSuffix(x.mode, "-bigtcp")
		args := []string{"network", "create", name, "--subnet", x.subnet(i).String(), "--subnet", x.subnet6(i).String(),
			"--mode", mode, "--mtu", fmt.Sprint(mtu)}
		if big {
			args = append(args, "--big-tcp", "on")
		}
		if _, err := x.cli(ctx, args...); err != nil {
			return err
		}
		x.undo.Push("xlane network rm "+name, func(ctx context.Context) error {
			_, err := x.cli(ctx, "network", "rm", name, "--force")
			return err
		})
		var ips, ips6 [2]netip.Addr
		var eps [2]harness.Endpoint
		for j, ctr := range x.ctrs {
			out, err := x.cli(ctx, "-o", "json", "endpoint", "add", name, "--netns", ctr,
				"--id", fmt.Sprintf("c%d-%d", j+1, mtu), "--ifname", fmt.Sprintf("eth%d", i))
			if err != nil {
				return err
			}
			if eps[j], err = harness.ParseEndpoint(out); err != nil {
				return err
			}
			ips[j] = eps[j].IPv4
			for _, a := range eps[j].IPs {
				if a.Is6() && !ips6[j].IsValid() {
					ips6[j] = a
				}
			}
			if !ips6[j].IsValid() {
				return fmt.Errorf("endpoint %s has no IPv6 address: %v", eps[j].ID, eps[j].IPs)
			}
		}
		x.setPair(mtu, ips)
		p := x.pairs[mtu]
		p.Node = x.node
		p.ClientIf, p.ServerIf = eps[0].IfName, eps[1].IfName
		p.ClientHostIf, p.ServerHostIf = eps[0].HostIf, eps[1].HostIf
		p.ClientEP, p.ServerEP = eps[0].ID, eps[1].ID
		var err error
		if p.ClientMAC, err = net.ParseMAC(eps[0].MAC); err != nil {
			return fmt.Errorf("endpoint %s: mac: %w", eps[0].ID, err)
		}
		// Routed: every frame goes to the gateway, the host veth's MAC.
		if p.NextHopMAC, err = net.ParseMAC(eps[0].HostMAC); err != nil {
			return fmt.Errorf("endpoint %s: host_mac: %w", eps[0].ID, err)
		}
		x.pairs[mtu] = p
		x.pairs6[mtu] = pairOf(p, ips6[0], ips6[1])
	}
	return nil
}

func (x *xlaneTopo) Notes(ctx context.Context) []string {
	var notes []string
	// BIG TCP as the daemon resolved it: `auto` follows this node's
	// calibration (internal/daemon/bigtcp.go), which the bench's daemons
	// skip (--calibrate-at-start=false), so plain modes run without it.
	for _, mtu := range x.mtus {
		out, err := x.cli(ctx, "-o", "json", "network", "inspect", x.netName(mtu))
		if err != nil {
			continue
		}
		var n struct {
			BigTCP  string `json:"big_tcp"`
			On4     bool   `json:"big_tcp_ipv4"`
			On6     bool   `json:"big_tcp_ipv6"`
			Because string `json:"big_tcp_reason"`
		}
		if json.Unmarshal([]byte(out), &n) == nil {
			notes = append(notes, fmt.Sprintf("%s: network %s: BIG TCP %s (ipv4 %v, ipv6 %v): %s", x.name, x.netName(mtu), n.BigTCP, n.On4, n.On6, n.Because))
		}
	}
	if x.mode == "tc" {
		if out, err := x.cli(ctx, "status"); err == nil {
			var cs []string
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) >= 3 && (f[0] == "from_endpoint" || f[0] == "to_endpoint") {
					cs = append(cs, f[0]+"/"+f[1]+"="+f[2])
				}
			}
			notes = append(notes, "tc: datapath counters (packets): "+strings.Join(cs, ", "))
		}
	}
	if v, err := harness.Run(ctx, harness.NSExec(x.node, "sh", "-c", "cat /proc/sys/net/netfilter/nf_conntrack_count 2>/dev/null || echo n/a")...); err == nil {
		notes = append(notes, fmt.Sprintf("%s: conntrack entries in the node netns at the end: %s", x.name, strings.TrimSpace(v)))
	}
	return notes
}

func humanBytes(b uint64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(b)/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(b)/1e6)
	}
	return fmt.Sprintf("%d B", b)
}

// addrAdd returns a advanced by n addresses.
func addrAdd(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}
