package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/rules"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// inNode runs fn inside a fresh network namespace (the "node") with a
// daemon whose state and pins are private to the test.
func inNode(t *testing.T, fn func(d *Daemon)) {
	t.Helper()
	inNodeWith(t, Config{}, fn)
}

// newNode is a fresh network namespace (the "node") and a Config with a
// state file and a pin directory private to the test (tag tells the pin
// directories of one test process apart), both removed when it ends.
func newNode(t *testing.T, tag string) (ns.NetNS, Config) {
	t.Helper()
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	pinDir := fmt.Sprintf("/sys/fs/bpf/xlt-%s%d", tag, os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	return node, Config{StatePath: filepath.Join(t.TempDir(), "state.db"), PinDir: pinDir, Log: slog.New(slog.DiscardHandler)}
}

// inNodeWith is inNode with cfg's flags (its state and pin paths are the
// test's).
func inNodeWith(t *testing.T, cfg Config, fn func(d *Daemon)) {
	t.Helper()
	node, paths := newNode(t, "")
	err := node.Do(func(ns.NetNS) error {
		cfg.StatePath, cfg.PinDir, cfg.Log = paths.StatePath, paths.PinDir, paths.Log
		d, err := newDaemon(cfg)
		if err != nil {
			return err
		}
		defer d.Close()
		fn(d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addNode adds a node as the server does: the request's text read into
// a model.Node at the edge (internal/api), then the cluster.
func addNode(d *Daemon, req api.NodeAdd) (*model.Node, error) {
	n, err := req.Node()
	if err != nil {
		return nil, err
	}
	return d.f.Cluster.AddNode(n)
}

func container(t *testing.T) string {
	t.Helper()
	c, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { c.Close(); testutils.UnmountNS(c) })
	return c.Path()
}

func xlaneLinks(t *testing.T) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "xl") {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

var errInjected = errors.New("injected failure")

// A failure at any step of endpoint add leaves no veth, no lease, no map
// entry and no pinned link behind.
func TestAddEndpointRollsBack(t *testing.T) {
	for _, step := range []string{"veth-created", "container-configured", "datapath-programmed"} {
		t.Run(step, func(t *testing.T) {
			inNode(t, func(d *Daemon) {
				if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.50.0.0/24", "fd00:50::/64"}}); err != nil {
					t.Fatal(err)
				}
				c := container(t)
				d.faults.Hook = func(s string) error {
					if s == step {
						return errInjected
					}
					return nil
				}
				_, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: c, ID: "doomed"})
				if !errors.Is(err, errInjected) {
					t.Fatalf("AddEndpoint = %v, want the injected failure", err)
				}
				d.faults.Hook = nil
				if l := xlaneLinks(t); len(l) != 0 {
					t.Errorf("links left after failed add: %v", l)
				}
				if addrs, _ := d.dp.EndpointAddrs(); len(addrs) != 0 {
					t.Errorf("endpoint map entries left: %v", addrs)
				}
				if devs, _ := d.dp.AttachedDevices(); len(devs) != 0 {
					t.Errorf("pinned links left: %v", devs)
				}
				if _, err := d.Endpoint("doomed"); !errors.Is(err, model.ErrNotFound) {
					t.Errorf("endpoint record after failed add: %v, want not found", err)
				}
				// The leases went back: the next endpoint gets the first
				// addresses, and the namespace's eth0 is free again.
				e, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: c})
				if err != nil {
					t.Fatalf("add after rollback: %v", err)
				}
				want := []netip.Addr{netip.MustParseAddr("10.50.0.2"), netip.MustParseAddr("fd00:50::2")}
				if !slices.Equal(e.IPs, want) {
					t.Errorf("add after rollback got %v, want %v", e.IPs, want)
				}
			})
		})
	}
}

func TestCreateNetworkRollsBack(t *testing.T) {
	inNode(t, func(d *Daemon) {
		d.faults.Hook = func(s string) error { return errInjected }
		_, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.51.0.0/24", "fd00:51::/64"}})
		if !errors.Is(err, errInjected) {
			t.Fatalf("CreateNetwork = %v, want the injected failure", err)
		}
		lo, _ := netlink.LinkByName("lo")
		addrs, _ := netlink.AddrList(lo, netlink.FAMILY_ALL)
		for _, a := range addrs {
			if strings.HasPrefix(a.IP.String(), "10.51.") || strings.HasPrefix(a.IP.String(), "fd00:51") {
				t.Errorf("gateway %s left on lo", a.IP)
			}
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, 0)
		for _, r := range routes {
			if r.Dst != nil && (strings.HasPrefix(r.Dst.String(), "10.51.") || strings.HasPrefix(r.Dst.String(), "fd00:51")) {
				t.Errorf("route %s left", r.Dst)
			}
		}
		if nets, _ := d.Networks(); len(nets) != 0 {
			t.Errorf("networks after failed create: %v", nets)
		}
	})
}

// Reconcile removes what no record accounts for and rebuilds what is
// missing.
func TestReconcile(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.52.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		e, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: container(t)})
		if err != nil {
			t.Fatal(err)
		}
		// A stale veth and pinned link, as a crash between kernel and
		// store work would leave them.
		stale := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlhdeadbeef00"}, PeerName: "xlcdeadbeef00"}
		if err := netlink.LinkAdd(stale); err != nil {
			t.Fatal(err)
		}
		sl, _ := netlink.LinkByName("xlhdeadbeef00")
		if err := d.dp.Attach("xlhdeadbeef00", sl.Attrs().Index, model.ModeTC); err != nil {
			t.Fatal(err)
		}
		// The endpoint's own tc links vanish (someone detached them).
		if err := d.dp.Detach(e.HostIf, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.Reconcile(); err != nil {
			t.Fatalf("Reconcile: %v", err)
		}
		if got := xlaneLinks(t); !slices.Equal(got, []string{e.HostIf}) {
			t.Errorf("links after reconcile: %v, want only %s", got, e.HostIf)
		}
		if devs, _ := d.dp.AttachedDevices(); !slices.Equal(devs, []string{e.HostIf}) {
			t.Errorf("attached after reconcile: %v, want only %s", devs, e.HostIf)
		}
	})
}

// A pin left by an older xlaned with another map layout is replaced, not
// fatal: the new daemon rebuilds its content from the store.
func TestIncompatiblePinReplaced(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "n", Subnets: []string{"10.53.0.0/24"}}); err != nil {
			t.Fatal(err)
		}
		e, err := d.AddEndpoint(api.EndpointAdd{Network: "n", Netns: container(t)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := d.cfg
		d.Close()
		for _, name := range []string{"xlane_config", "xlane_endpoints"} {
			path := filepath.Join(cfg.PinDir, "maps", name)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 40, MaxEntries: 8})
			if err != nil {
				t.Fatal(err)
			}
			if err := old.Pin(path); err != nil {
				t.Fatal(err)
			}
			old.Close()
		}
		d2, err := newDaemon(cfg)
		if err != nil {
			t.Fatalf("restart over incompatible pins: %v", err)
		}
		defer d2.Close()
		addrs, err := d2.dp.EndpointAddrs()
		if err != nil || len(addrs) != 1 || addrs[0] != e.IPs[0] {
			t.Fatalf("endpoint map after restart: %v %v, want the endpoint's %v rebuilt", addrs, err, e.IPs)
		}
	})
}

// ICC off and isolation reach the datapath as endpoint flags; kernel mode,
// which has no datapath for them, refuses both, at create and on a switch.
func TestNetworkPolicy(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if err := d.dp.Available(); err != nil {
			t.Fatalf("no BPF datapath (root on a kernel with BPF is required): %v", err)
		}
		off := false
		// The entry's ICCOff and Isolated are its XL_EP_NO_ICC and
		// XL_EP_ISOLATED flags (datapath.TestEndpointEncoding).
		for _, c := range []struct {
			req              api.NetworkCreate
			iccOff, isolated bool
		}{
			{api.NetworkCreate{Name: "plain", Subnets: []string{"10.52.0.0/24"}, Mode: "tc"}, false, false},
			{api.NetworkCreate{Name: "quiet", Subnets: []string{"10.53.0.0/24"}, Mode: "tc", Masquerade: &off, ICC: &off}, true, false},
			{api.NetworkCreate{Name: "apart", Subnets: []string{"10.54.0.0/24"}, Mode: "tc", ICC: &off, Isolated: true}, true, true},
		} {
			n, err := d.CreateNetwork(c.req)
			if err != nil {
				t.Fatalf("create %s: %v", c.req.Name, err)
			}
			if n.ICCOff != c.iccOff || n.Isolated != c.isolated {
				t.Errorf("network %s: icc off %v isolated %v", n.Name, n.ICCOff, n.Isolated)
			}
			e, err := d.AddEndpoint(api.EndpointAdd{Network: c.req.Name, Netns: container(t)})
			if err != nil {
				t.Fatalf("add endpoint to %s: %v", c.req.Name, err)
			}
			v, err := d.dp.Endpoint(e.IPs[0])
			if err != nil {
				t.Fatal(err)
			}
			if v.ICCOff != c.iccOff || v.Isolated != c.isolated || v.NetworkID != n.ID {
				t.Errorf("network %s: endpoint icc off %v isolated %v network %d, want %v %v %d", n.Name, v.ICCOff, v.Isolated, v.NetworkID, c.iccOff, c.isolated, n.ID)
			}
		}
		for _, c := range []struct {
			req   api.NetworkCreate
			field string
		}{
			{api.NetworkCreate{Name: "k1", Subnets: []string{"10.55.0.0/24"}, Mode: "kernel", Masquerade: &off, ICC: &off}, "icc"},
			{api.NetworkCreate{Name: "k2", Subnets: []string{"10.56.0.0/24"}, Mode: "kernel", Masquerade: &off, Isolated: true}, "isolated"},
		} {
			var fe *model.FieldError
			if _, err := d.CreateNetwork(c.req); !errors.As(err, &fe) || fe.Field != c.field {
				t.Errorf("create %s in kernel mode: %v, want a refusal on %s", c.req.Name, err, c.field)
			}
		}
		var fe *model.FieldError
		if _, err := d.UpdateNetwork("quiet", api.NetworkUpdate{Mode: "kernel"}); !errors.As(err, &fe) || fe.Field != "icc" {
			t.Errorf("switch an ICC-off network to kernel: %v, want a refusal on icc", err)
		}
	})
}

// Start starts the firewall: the stored rule set is installed again before
// Start returns, without any API request (the server only registers
// routes).
func TestFirewallStartedByStart(t *testing.T) {
	node, cfg := newNode(t, "fw-")
	pinDir := cfg.PinDir
	err := node.Do(func(ns.NetNS) error {
		d, err := newDaemon(cfg)
		if err != nil {
			return err
		}
		if d.Firewall() == nil || d.Firewall().Available() != nil {
			d.Close()
			return fmt.Errorf("firewall after Start: %v", d.Firewall())
		}
		_, err = d.Firewall().Apply(rules.RuleSet{Rules: []rules.Rule{{Name: "no-ssh", Action: "drop", Proto: rules.List{"tcp"}, DstPort: rules.List{"22"}}}}, false)
		d.Close()
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		// Switch the datapath's firewall off behind the daemon's back.
		dp, err := datapath.Open(pinDir, bpf.Options{})
		if err != nil {
			return err
		}
		defer dp.Close()
		maps, err := dp.FirewallMaps()
		if err != nil {
			return err
		}
		in, err := firewall.NewInstaller(maps)
		if err != nil {
			return err
		}
		if err := in.Disable(); err != nil {
			return err
		}
		d, err = newDaemon(cfg)
		if err != nil {
			return err
		}
		defer d.Close()
		st, err := in.State()
		if err != nil {
			return err
		}
		if st.On == 0 {
			return errors.New("the stored rule set is not installed when Start returns")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A start that fails anywhere closes what Open opened, and the daemon
// starts again on the same state and pins: after a feature missing from
// Register (named), the cluster's flags refused while the features are
// made, and the start's context ended, the state file opens at once (an
// open store would hold its lock: "in use by another xlaned"); then a
// daemon starts and has the network the first start made.
func TestStartFailureClosesWhatOpenOpened(t *testing.T) {
	node, cfg := newNode(t, "start-")
	// opened is Open with the test's features registered, one changed by
	// change.
	opened := func(change func(*Features)) (*Daemon, error) {
		d, err := Open(cfg)
		if err != nil {
			return nil, err
		}
		f, err := FeaturesForTest(d)
		if err != nil {
			d.Close()
			return nil, err
		}
		change(&f)
		d.Register(f)
		return d, nil
	}
	// closed fails unless the state file is free (an open store holds
	// its lock: "in use by another xlaned").
	closed := func(after string) error {
		st, err := store.Open(cfg.StatePath)
		if err != nil {
			return fmt.Errorf("after %s: the store is still open: %w", after, err)
		}
		return st.Close()
	}
	err := node.Do(func(ns.NetNS) error {
		d, err := newDaemon(cfg)
		if err != nil {
			return err
		}
		_, err = d.CreateNetwork(api.NetworkCreate{Name: "n", Mode: "tc", Subnets: []string{"10.77.0.0/24"}})
		d.Close()
		if err != nil {
			return err
		}

		if d, err = opened(func(f *Features) { f.Sockets = nil }); err != nil {
			return err
		}
		if err := d.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "Sockets") {
			return fmt.Errorf("Start without the socket layer = %v, want an error naming Sockets", err)
		}
		if err := closed("a feature missing"); err != nil {
			return err
		}

		bad := cfg
		bad.Cluster.Routing = "native" // without a node name: refused by cluster.New
		if d, err := newDaemon(bad); err == nil {
			d.Close()
			return errors.New("a start with --routing and no --node-name succeeded")
		}
		if err := closed("the cluster's flags refused"); err != nil {
			return err
		}

		if d, err = opened(func(*Features) {}); err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := d.Start(ctx); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("Start with its context ended = %v, want context.Canceled", err)
		}
		if err := closed("the context ended"); err != nil {
			return err
		}
		if d, err = newDaemon(cfg); err != nil {
			return fmt.Errorf("start after the failed ones: %w", err)
		}
		defer d.Close()
		_, err = d.Network("n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
