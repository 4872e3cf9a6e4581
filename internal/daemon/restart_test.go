package daemon

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
)

// One endpoint that cannot be applied does not stop a reconcile (nor so
// the daemon's start): the others are applied, the failure is kept on the
// endpoint (state "degraded", its error) and in the health summary.
func TestReconcileFailsPerEndpoint(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.53.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		bad, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: container(t), ID: "bad"})
		if err != nil {
			t.Fatal(err)
		}
		good, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: container(t), ID: "good"})
		if err != nil {
			t.Fatal(err)
		}
		// Both lose their programs; re-applying the first one (in the
		// store's order: "bad") fails.
		for _, e := range []string{bad.HostIf, good.HostIf} {
			if err := d.dp.Detach(e, 0); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		d.faults.Hook = func(s string) error {
			if s == "veth-created" {
				if calls++; calls == 1 {
					return errInjected
				}
			}
			return nil
		}
		err = d.Reconcile()
		d.faults.Hook = nil
		if err != nil {
			t.Fatalf("Reconcile = %v, want nil (failures are per endpoint)", err)
		}
		if hooks := d.dp.Hooks(good.HostIf); len(hooks) == 0 {
			t.Errorf("endpoint good has no programs after reconcile: the failure of another stopped it")
		}
		info, err := d.Endpoint("bad")
		if err != nil {
			t.Fatal(err)
		}
		if info.State != "degraded" || !strings.Contains(info.Error, errInjected.Error()) {
			t.Errorf("endpoint bad: state %q error %q, want degraded with the injected failure", info.State, info.Error)
		}
		if info, _ := d.Endpoint("good"); info.State != "ready" || info.Error != "" {
			t.Errorf("endpoint good: state %q error %q, want ready", info.State, info.Error)
		}
		h := d.f.Reporter.Health()
		if h.OK || !strings.Contains(strings.Join(h.Problems, "\n"), "endpoint bad: "+errInjected.Error()) {
			t.Errorf("health ok=%v problems %q, want the endpoint's failure", h.OK, h.Problems)
		}
		if n := d.f.Reporter.Snapshot().Unapplied[objEndpoint]; n != 1 {
			t.Errorf("xlane_unapplied_objects{kind=endpoint} = %d, want 1", n)
		}
		// The next reconcile that applies it clears it.
		if err := d.Reconcile(); err != nil {
			t.Fatal(err)
		}
		if n := d.f.Reporter.Snapshot().Unapplied[objEndpoint]; n != 0 {
			t.Errorf("xlane_unapplied_objects{kind=endpoint} after a clean reconcile = %d, want 0", n)
		}
		if info, _ := d.Endpoint("bad"); info.State != "ready" {
			t.Errorf("endpoint bad after a clean reconcile: state %q error %q", info.State, info.Error)
		}
	})
}

// A crash between a network's kernel work and its store record (here a
// panic at the last step, as kill -9 would leave it) leaves the gateway
// addresses on lo and the unreachable routes: the next start removes
// them, the same subnets can be created again, and --uninstall leaves
// none of them either.
func TestCrashedCreateNetworkSwept(t *testing.T) {
	node, cfg := newNode(t, "sweep-")
	req := api.NetworkCreate{Name: "n", Subnets: []string{"10.54.0.0/24", "fd00:54::/64"}}
	leftovers := func() []string {
		var out []string
		lo, _ := netlink.LinkByName("lo")
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_ALL)
		for _, a := range addrs {
			if s := a.IP.String(); strings.HasPrefix(s, "10.54.") || strings.HasPrefix(s, "fd00:54") {
				out = append(out, "address "+s)
			}
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
		for _, r := range routes {
			if r.Dst != nil && (strings.HasPrefix(r.Dst.String(), "10.54.") || strings.HasPrefix(r.Dst.String(), "fd00:54")) {
				out = append(out, "route "+r.Dst.String())
			}
		}
		return out
	}
	// The node's own address and route in a range of their own: the
	// sweep must leave what xlane did not mark.
	err := node.Do(func(ns.NetNS) error {
		d, err := newDaemon(cfg)
		if err != nil {
			return err
		}
		d.faults.Hook = func(s string) error {
			if s == "network-applied" {
				panic("crash")
			}
			return nil
		}
		func() {
			defer func() { recover() }()
			d.CreateNetwork(req)
		}()
		d.faults.Hook = nil
		d.Close()
		// The gateways, the unreachable routes (and the IPv6 gateway's
		// prefix route the kernel adds).
		if l := leftovers(); len(l) != 5 {
			return fmt.Errorf("after the crash: %v, want the 2 gateways and 2 unreachable routes a crash leaves", l)
		}
		lo, _ := netlink.LinkByName("lo")
		own := &netlink.Addr{IPNet: prefixOf4("10.55.0.1")}
		if err := netlink.AddrAdd(lo, own); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{Dst: prefixOf4("10.56.0.0/24"), Type: 7 /* unreachable */, Table: 254}); err != nil {
			return err
		}

		d, err = newDaemon(cfg)
		if err != nil {
			return fmt.Errorf("start after the crash: %w", err)
		}
		if l := leftovers(); len(l) != 0 {
			d.Close()
			return fmt.Errorf("after the restart: %v left", l)
		}
		if _, err := d.CreateNetwork(req); err != nil {
			d.Close()
			return fmt.Errorf("create the same subnets again: %w", err)
		}
		if err := d.Uninstall(); err != nil {
			return err
		}
		if l := leftovers(); len(l) != 0 {
			return fmt.Errorf("after uninstall: %v left", l)
		}
		// Not xlane's: still there.
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_V4)
		found := false
		for _, a := range addrs {
			found = found || a.IP.String() == "10.55.0.1"
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: prefixOf4("10.56.0.0/24"), Table: 254}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if !found || len(routes) != 1 {
			return fmt.Errorf("the node's own address (kept: %v) or unreachable route (%d) was swept", found, len(routes))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func prefixOf4(s string) *net.IPNet {
	if !strings.Contains(s, "/") {
		s += "/32"
	}
	ip, p, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	p.IP = ip
	return p
}
