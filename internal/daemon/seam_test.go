package daemon

import (
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/datapath"
	"github.com/xlane-dev/xlane/internal/datapath/datapathtest"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/observe"
	"github.com/xlane-dev/xlane/internal/store"
)

// fakeDaemon is a daemon on a fake datapath and a private store: no root,
// no BPF, no namespaces. Only what touches the store and the datapath alone
// (services, published ports) runs on it.
func fakeDaemon(t testing.TB) (*Daemon, *datapathtest.Fake) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	fake := datapathtest.New()
	d := &Daemon{cfg: Config{NATPorts: DefaultNATPorts}, log: slog.New(slog.DiscardHandler), store: st, dp: fake, done: make(chan struct{})}
	f, err := FeaturesForTest(d) // alone
	if err != nil {
		t.Fatal(err)
	}
	d.Register(f)
	t.Cleanup(func() { d.Close() })
	return d, fake
}

// checkPorts fails unless the fake datapath publishes exactly the stored
// endpoints' ports.
func checkPorts(t *testing.T, d *Daemon, fake *datapathtest.Fake) {
	t.Helper()
	var want []datapath.Port
	err := d.store.View(func(tx *store.Tx) error {
		eps, err := tx.Endpoints()
		for i := range eps {
			want = append(want, portEntries(&eps[i])...)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	have, _ := fake.PublishedPorts()
	if want = datapathtest.SortPorts(want); !slices.Equal(have, want) {
		t.Errorf("datapath ports %v, store says %v", have, want)
	}
}

// Publishing ports that fails part-way puts back the ports the endpoint
// had, entry for entry (a remapped node port included).
func TestPublishPortsRollbackLeavesDatapathAsStore(t *testing.T) {
	d, fake := fakeDaemon(t)
	n := &model.Network{Name: "n", ID: 1, Mode: model.ModeTC, Masquerade: true, MTU: 1500, Device: "xlnet1",
		Subnets:  []netip.Prefix{netip.MustParsePrefix("10.50.0.0/24"), netip.MustParsePrefix("fd00:50::/64")},
		Gateways: []netip.Addr{netip.MustParseAddr("10.50.0.1"), netip.MustParseAddr("fd00:50::1")}, Created: time.Now()}
	e := &model.Endpoint{ID: "e1", Network: "n", IfName: "eth0", IPs: []netip.Addr{netip.MustParseAddr("10.50.0.2"), netip.MustParseAddr("fd00:50::2")}}
	e.HostIf, e.PeerIf = hostIfNames(e.ID)
	if err := d.store.Update(func(tx *store.Tx) error {
		if err := tx.PutNetwork(n); err != nil {
			return err
		}
		return tx.PutEndpoint(e)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PublishPorts("e1", api.PortsUpdate{Ports: []string{"8080:80"}}, false); err != nil {
		t.Fatal(err)
	}
	checkPorts(t, d, fake)

	// Remap 8080 and add 8081; the datapath fails on 8081's IPv6 entry,
	// after 8080's new target is in place.
	fake.Fail = datapathtest.FailOp("put-port", func(a any) bool {
		p := a.(datapath.Port)
		return p.NodePort == 8081 && p.Addr.Is6()
	})
	if _, err := d.PublishPorts("e1", api.PortsUpdate{Ports: []string{"8080:90", "8081:81"}}, false); !errors.Is(err, datapathtest.ErrFake) {
		t.Fatalf("PublishPorts = %v, want the injected failure", err)
	}
	checkPorts(t, d, fake)
	if ps, _ := fake.PublishedPorts(); len(ps) != 2 || ps[0].Port != 80 {
		t.Errorf("published after rollback: %v, want 8080 -> :80 for both families", ps)
	}
}

// Where BPF does not load, auto resolves to kernel mode and every datapath
// request fails with datapath.ErrUnavailable (model.ErrUnavailable to the
// API), saying what was asked.
func TestUnavailableDatapath(t *testing.T) {
	d, _ := fakeDaemon(t)
	d.dp = datapath.NewUnavailable(errors.New("no bpffs"))
	d.f.Observe = observe.New(coreView{d}, observe.Config{}, observe.Deps{})
	d.f.Observe.Start()
	if m, why, err := d.resolveMode(model.ModeAuto, nil); err != nil || m != model.ModeKernel {
		t.Errorf("resolveMode(auto) = %s, %q, %v; want kernel", m, why, err)
	}
	if _, _, err := d.resolveMode(model.ModeTC, nil); !errors.Is(err, datapath.ErrUnavailable) {
		t.Errorf("resolveMode(tc) = %v, want ErrUnavailable", err)
	}
	web, err := api.ServiceCreate{Name: "web", VIP: "10.96.0.1:80", Backends: []string{"10.1.0.2:8080"}}.Service()
	if err != nil {
		t.Fatal(err)
	}
	_, errSvc := d.f.Services.Create(web)
	_, errFlows := d.Observe().Flows(0)
	_, errStats := d.Observe().CTStats()
	_, errPorts := d.PublishPorts("e1", api.PortsUpdate{Ports: []string{"8080:80"}}, false)
	for _, err := range []error{errSvc, errFlows, errStats, errPorts} {
		if !errors.Is(err, datapath.ErrUnavailable) || !errors.Is(err, model.ErrUnavailable) {
			t.Errorf("got %v, want datapath.ErrUnavailable", err)
		}
	}
	if err := d.f.Services.Delete("web"); err != nil {
		t.Errorf("DeleteService of nothing = %v", err)
	}
}

// Reconcile removes what the datapath holds and the store does not
// account for: endpoint entries, attached devices, published ports. It
// runs in a private namespace (Reconcile also prunes the node's xlane
// devices and policy rules), on the fake datapath.
func TestReconcileOnFake(t *testing.T) {
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	d, fake := fakeDaemon(t)
	stale := netip.MustParseAddr("10.77.0.2")
	for _, err := range []error{
		fake.PutEndpoint(stale, model.EndpointEntry{}),
		fake.Attach("xlh0123456789", 7, model.ModeTC),
		fake.PutPort(datapath.Port{Proto: 6, NodePort: 8080, Addr: stale, Port: 80}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := node.Do(func(ns.NetNS) error { return d.Reconcile() }); err != nil {
		t.Fatal(err)
	}
	addrs, _ := fake.EndpointAddrs()
	devs, _ := fake.AttachedDevices()
	ports, _ := fake.PublishedPorts()
	if len(addrs)+len(devs)+len(ports) != 0 {
		t.Errorf("after reconcile on an empty store: endpoints %v, devices %v, ports %v", addrs, devs, ports)
	}
	checkPorts(t, d, fake)
}

// auto takes the first mode of the calibration's ranking that gives the
// network every feature it asks for: kernel mode only for a network that
// asks for nothing it lacks, never in Kubernetes mode (AutoBPFOnly), whose
// Services and policies need a BPF mode; an explicit mode always wins.
func TestAutoNeeds(t *testing.T) {
	d, _ := fakeDaemon(t)
	d.feat = features.Probe() // tc must be able to run
	if err := d.modeMissing(AutoMode); err != nil {
		t.Fatalf("%s cannot run on this kernel: %v", AutoMode, err)
	}
	off := false
	plain := api.NetworkCreate{Masquerade: &off, Internal: true}
	kernelFirst := &calibrate.Choice{Mode: "kernel", Ranked: []string{"kernel", "tc"}, Reason: "kernel: beat tc", At: time.Now()}
	xdpFirst := &calibrate.Choice{Mode: "xdp", Ranked: []string{"xdp", "kernel", "tc"}, Reason: "xdp: beat tc", At: time.Now()}
	legacy := &calibrate.Choice{Mode: "kernel", Reason: "kernel: fastest here", At: time.Now()}
	vm := []model.Endpoint{{VM: true}}
	for _, c := range []struct {
		name   string
		choice *calibrate.Choice
		kube   bool
		needs  func() []need
		want   model.Mode
		reason string
	}{
		{"uncalibrated", nil, false, func() []need { return d.createNeeds(plain) }, AutoMode, "not calibrated"},
		{"plain network takes kernel", kernelFirst, false, func() []need { return d.createNeeds(plain) }, model.ModeKernel, "kernel: beat tc"},
		{"default CLI network masquerades", kernelFirst, false, func() []need { return d.createNeeds(api.NetworkCreate{}) }, AutoMode, "kernel has no masquerade, published ports and services"},
		{"routed network publishes ports", kernelFirst, false, func() []need { return d.createNeeds(api.NetworkCreate{Masquerade: &off}) }, AutoMode, "kernel has no published ports"},
		{"isolated", kernelFirst, false, func() []need {
			return d.createNeeds(api.NetworkCreate{Masquerade: &off, Internal: true, Isolated: true})
		}, AutoMode, "kernel has no isolation"},
		{"icc off", kernelFirst, false, func() []need {
			return d.createNeeds(api.NetworkCreate{Masquerade: &off, Internal: true, ICC: &off})
		}, AutoMode, "kernel has no ICC off"},
		{"vlan", kernelFirst, false, func() []need {
			return d.createNeeds(api.NetworkCreate{Masquerade: &off, Internal: true, VLAN: 7})
		}, AutoMode, "kernel has no VLAN tagging"},
		{"kubernetes", kernelFirst, true, func() []need { return d.createNeeds(plain) }, AutoMode, "Kubernetes Services"},
		{"a choice without a ranking", legacy, false, func() []need { return d.createNeeds(api.NetworkCreate{}) }, AutoMode, "kernel has no masquerade"},
		{"xdp first where it fits", xdpFirst, false, func() []need { return d.createNeeds(api.NetworkCreate{}) }, model.ModeXDP, "xdp: beat tc"},
		{"netkit skips xdp", xdpFirst, false, func() []need {
			return d.createNeeds(api.NetworkCreate{Masquerade: &off, Internal: true, Device: "netkit"})
		}, model.ModeKernel, "xdp has no netkit devices"},
		{"a network with a VM endpoint keeps it", xdpFirst, false, func() []need {
			return d.networkNeeds(&model.Network{Masquerade: true}, vm)
		}, AutoMode, "xdp has no VM endpoints"},
		{"an existing network keeps its ports", kernelFirst, false, func() []need {
			return d.networkNeeds(&model.Network{Internal: true}, []model.Endpoint{{Ports: []model.PortMapping{{NodePort: 80}}}})
		}, AutoMode, "kernel has no published ports"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d.cfg.AutoBPFOnly = c.kube
			d.f.Calibration.SetChoice(c.choice)
			m, why, err := d.resolveMode(model.ModeAuto, c.needs())
			if err != nil || m != c.want || !strings.Contains(why, c.reason) {
				t.Errorf("resolveMode(auto) = %s, %q, %v; want %s, a reason saying %q", m, why, err, c.want, c.reason)
			}
		})
	}
	d.cfg.AutoBPFOnly = true
	if m, _, err := d.resolveMode(model.ModeKernel, d.createNeeds(api.NetworkCreate{})); err != nil || m != model.ModeKernel {
		t.Errorf("resolveMode(kernel) with AutoBPFOnly = %s, %v; an explicit mode still wins", m, err)
	}
}
