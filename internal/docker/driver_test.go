package docker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/store"
)

// fakeDaemon keeps networks and endpoints in memory, as the daemon would
// with its kernel work left out; the store is a real state file.
type fakeDaemon struct {
	st       *store.Store
	nets     map[string]*model.Network
	eps      map[string]*model.Endpoint
	creates  []api.NetworkCreate
	adds     []api.EndpointAdd
	failNext error
}

func newFake(t *testing.T) *fakeDaemon {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fakeDaemon{st: st, nets: map[string]*model.Network{}, eps: map[string]*model.Endpoint{}}
}

func (f *fakeDaemon) Store() *store.Store { return f.st }

func (f *fakeDaemon) CreateNetwork(req api.NetworkCreate) (*model.Network, error) {
	f.creates = append(f.creates, req)
	if err := f.failNext; err != nil {
		f.failNext = nil
		return nil, err
	}
	if _, ok := f.nets[req.Name]; ok {
		return nil, model.Conflictf("network %q already exists", req.Name)
	}
	n := &model.Network{Name: req.Name, Mode: model.Mode(req.Mode), MTU: req.MTU, Internal: req.Internal,
		ICCOff: req.ICC != nil && !*req.ICC, Isolated: req.Isolated}
	if n.Mode == "" {
		n.Mode = model.ModeTC
	}
	for i, s := range req.Subnets {
		p := netip.MustParsePrefix(s)
		n.Subnets = append(n.Subnets, p)
		gw := p.Addr().Next()
		if i < len(req.Gateways) {
			gw = netip.MustParseAddr(req.Gateways[i])
		}
		n.Gateways = append(n.Gateways, gw)
	}
	f.nets[n.Name] = n
	return n, nil
}

func (f *fakeDaemon) DeleteNetwork(name string, force bool) error {
	for id, e := range f.eps {
		if e.Network == name {
			if !force {
				return model.Conflictf("network %q has endpoints", name)
			}
			delete(f.eps, id)
		}
	}
	delete(f.nets, name)
	return nil
}

func (f *fakeDaemon) Network(name string) (*api.NetworkInfo, error) {
	n, ok := f.nets[name]
	if !ok {
		return nil, model.NotFoundf("network %q", name)
	}
	return &api.NetworkInfo{Network: *n}, nil
}

func (f *fakeDaemon) AddEndpoint(req api.EndpointAdd) (*model.Endpoint, error) {
	f.adds = append(f.adds, req)
	if _, ok := f.eps[req.ID]; ok {
		return nil, model.Conflictf("endpoint %q already exists", req.ID)
	}
	n := f.nets[req.Network]
	e := &model.Endpoint{ID: req.ID, Network: req.Network, IfName: "eth0", HostIf: "xlh" + req.ID[:10], PeerIf: "xlc" + req.ID[:10], MAC: "02:00:00:00:00:07"}
	if req.MAC != "" {
		e.MAC = req.MAC
	}
	for _, s := range req.IPs {
		e.IPs = append(e.IPs, netip.MustParseAddr(s))
	}
	if len(e.IPs) == 0 { // as the daemon's IPAM would
		for _, p := range n.Subnets {
			e.IPs = append(e.IPs, p.Addr().Next().Next())
		}
	}
	f.eps[e.ID] = e
	return e, nil
}

func (f *fakeDaemon) RemoveEndpoint(id string) error { delete(f.eps, id); return nil }

func (f *fakeDaemon) PublishPorts(id string, req api.PortsUpdate, withdraw bool) (*model.Endpoint, error) {
	e, ok := f.eps[id]
	if !ok {
		return nil, model.NotFoundf("endpoint %q", id)
	}
	for _, s := range req.Ports {
		pm, err := model.ParsePortMapping(s)
		if err != nil {
			return nil, err
		}
		e.Ports = slices.DeleteFunc(e.Ports, func(x model.PortMapping) bool { return x == pm })
		if !withdraw {
			e.Ports = append(e.Ports, pm)
		}
	}
	return e, nil
}

func (f *fakeDaemon) Endpoint(id string) (*api.EndpointInfo, error) {
	e, ok := f.eps[id]
	if !ok {
		return nil, model.NotFoundf("endpoint %q", id)
	}
	return &api.EndpointInfo{Endpoint: *e, State: "ready"}, nil
}

type testDriver struct {
	t       *testing.T
	f       *fakeDaemon
	dr      *Driver
	h       http.Handler
	allowed int             // forwarding rules: +1 allow, -1 remove
	proxied map[string]bool // host port -> target, while relayed
}

type fakeProxy struct {
	td  *testDriver
	key string
}

func (p fakeProxy) stop() { delete(p.td.proxied, p.key) }

func newTestDriver(t *testing.T, f *fakeDaemon) *testDriver {
	td := &testDriver{t: t, f: f, proxied: map[string]bool{}}
	dr := New(f, slog.New(slog.DiscardHandler))
	dr.startProxy = func(proto, listen string, target netip.AddrPort) (stopper, error) {
		key := fmt.Sprintf("%s->%s", listen, target)
		if proto == "udp" {
			key = "udp " + key
		}
		td.proxied[key] = true
		return fakeProxy{td, key}, nil
	}
	dr.peerOnNode = func(string) bool { return true }
	dr.allowForwarding = func() error { td.allowed = 1; return nil }
	dr.disallowForwarding = func() error { td.allowed = -1; return nil }
	td.dr, td.h = dr, dr.Handler()
	return td
}

// call posts body (a value or a raw string) to /method and returns the
// status and the decoded answer.
func (td *testDriver) call(method string, body any) (int, map[string]any) {
	td.t.Helper()
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		raw, _ = json.Marshal(body)
	}
	rec := httptest.NewRecorder()
	td.h.ServeHTTP(rec, httptest.NewRequest("POST", "/"+method, bytes.NewReader(raw)))
	var out map[string]any
	b, _ := io.ReadAll(rec.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		td.t.Fatalf("%s: answer %q is not JSON: %v", method, b, err)
	}
	return rec.Code, out
}

// ok calls method and fails the test unless it succeeded.
func (td *testDriver) ok(method string, body any) map[string]any {
	td.t.Helper()
	code, out := td.call(method, body)
	if code != http.StatusOK || out["Err"] != nil {
		td.t.Fatalf("%s: %d %v", method, code, out)
	}
	return out
}

// fails calls method and checks it failed with a sentence containing want.
func (td *testDriver) fails(method string, body any, want string) {
	td.t.Helper()
	code, out := td.call(method, body)
	msg, _ := out["Err"].(string)
	if code != http.StatusOK || !strings.HasPrefix(msg, "xlane: ") || !strings.Contains(msg, want) {
		td.t.Fatalf("%s: %d %v, want 200 with an Err saying %q", method, code, out, want)
	}
}

var (
	netID = strings.Repeat("ab", 32)
	epID  = strings.Repeat("cd", 32)
	epID2 = strings.Repeat("ef", 32)
)

func dualStack(id string, opts map[string]any) createNetworkRequest {
	if opts == nil {
		opts = map[string]any{}
	}
	return createNetworkRequest{
		NetworkID: id,
		Options:   map[string]any{optGeneric: opts, optEnableIPv6: true},
		IPv4Data:  []ipamData{{AddressSpace: "LocalDefault", Pool: "172.30.0.0/16", Gateway: "172.30.0.1/16"}},
		IPv6Data:  []ipamData{{AddressSpace: "LocalDefault", Pool: "fd00:30::/64", Gateway: "fd00:30::1/64"}},
	}
}

func TestProtocolBasics(t *testing.T) {
	td := newTestDriver(t, newFake(t))
	if out := td.ok("Plugin.Activate", ""); !reflect.DeepEqual(out["Implements"], []any{"NetworkDriver"}) {
		t.Errorf("Activate: %v", out)
	}
	if out := td.ok("NetworkDriver.GetCapabilities", "null"); out["Scope"] != "local" || out["ConnectivityScope"] != "local" {
		t.Errorf("GetCapabilities: %v", out)
	}
	for _, m := range []string{"NetworkDriver.AllocateNetwork", "NetworkDriver.Nope", "Other.Thing"} {
		if code, out := td.call(m, "{}"); code != http.StatusNotFound || out["Err"] == nil {
			t.Errorf("%s: %d %v, want 404 with Err (Docker reads it as not implemented)", m, code, out)
		}
	}
	if code, out := td.call("NetworkDriver.CreateNetwork", "{not json"); code != http.StatusBadRequest || out["Err"] == nil {
		t.Errorf("bad JSON: %d %v, want 400 with Err", code, out)
	}
	td.ok("NetworkDriver.DiscoverNew", discoveryNotification{DiscoveryType: 1, DiscoveryData: map[string]any{"Address": "10.0.0.1"}})
	td.ok("NetworkDriver.DiscoverDelete", discoveryNotification{DiscoveryType: 1})
}

func TestCreateNetworkOptions(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	td.ok("NetworkDriver.CreateNetwork", dualStack(netID, map[string]any{
		optMTU: "9000", optMode: "kernel", optIfPrefix: "net", optMasquerade: "false",
		"com.docker.network.bridge.name": "br-x", "com.example.label": "x",
	}))
	want := api.NetworkCreate{
		Name: "docker-" + netID[:12], Subnets: []string{"172.30.0.0/16", "fd00:30::/64"},
		Gateways: []string{"172.30.0.1", "fd00:30::1"}, Mode: "kernel", MTU: 9000, Masquerade: new(bool), Device: "veth",
	}
	if !reflect.DeepEqual(f.creates[0], want) {
		t.Errorf("network create\n got %+v\nwant %+v", f.creates[0], want)
	}
	if td.allowed != 1 {
		t.Errorf("forwarding rules not added")
	}
	// Docker retries: the same network again is fine.
	td.ok("NetworkDriver.CreateNetwork", dualStack(netID, map[string]any{optMTU: "9000", optMode: "kernel", optIfPrefix: "net"}))

	for _, c := range []struct {
		name string
		req  createNetworkRequest
		want string
	}{
		{"bad masquerade", dualStack(strings.Repeat("0c", 32), map[string]any{optMasquerade: "sometimes"}), `enable_ip_masquerade="sometimes": want true or false`},
		{"bad icc", dualStack(strings.Repeat("02", 32), map[string]any{optICC: "maybe"}), `enable_icc="maybe": want true or false`},
		{"bad mtu", dualStack(strings.Repeat("03", 32), map[string]any{optMTU: "big"}), `mtu="big": want a positive number`},
		{"bad mode", dualStack(strings.Repeat("04", 32), map[string]any{optMode: "warp"}), `xlane.mode="warp": unknown mode`},
		{"unknown xlane option", dualStack(strings.Repeat("05", 32), map[string]any{"xlane.turbo": "1"}), "xlane.turbo: unknown xlane option (xlane knows xlane.mode and xlane.isolated)"},
		{"bad isolated", dualStack(strings.Repeat("01", 32), map[string]any{optIsolated: "mostly"}), `xlane.isolated="mostly": want true or false`},
		// A retry must be the same network: not one with ICC off now.
		{"same id, icc off", dualStack(netID, map[string]any{optMTU: "9000", optMode: "kernel", optIfPrefix: "net", optICC: "false"}), "already exists"},
		{"bad prefix", dualStack(strings.Repeat("06", 32), map[string]any{optIfPrefix: "Eth-"}), "container_iface_prefix"},
		{"two pools", createNetworkRequest{NetworkID: strings.Repeat("07", 32), IPv4Data: []ipamData{{Pool: "10.1.0.0/24"}, {Pool: "10.2.0.0/24"}}},
			"takes one IPv4 subnet; Docker sent 2 (10.1.0.0/24, 10.2.0.0/24)"},
		{"null ipam", createNetworkRequest{NetworkID: strings.Repeat("08", 32), IPv4Data: []ipamData{{Pool: "0.0.0.0/0"}}}, "null IPAM driver"},
		{"no ipv4", createNetworkRequest{NetworkID: strings.Repeat("09", 32)}, "no IPv4 subnet"},
		{"ipv6 without pool", createNetworkRequest{NetworkID: strings.Repeat("0a", 32), Options: map[string]any{optEnableIPv6: true},
			IPv4Data: []ipamData{{Pool: "10.3.0.0/24"}}}, "IPv6 is enabled but Docker sent no IPv6 subnet"},
		{"not an id", createNetworkRequest{NetworkID: "../etc", IPv4Data: []ipamData{{Pool: "10.4.0.0/24"}}}, "is not a Docker ID"},
		{"same id, other subnet", createNetworkRequest{NetworkID: netID, IPv4Data: []ipamData{{Pool: "10.5.0.0/24"}}}, "already exists"},
	} {
		t.Run(c.name, func(t *testing.T) { td.fails("NetworkDriver.CreateNetwork", c.req, c.want) })
	}

	f.failNext = model.Conflictf("subnet 172.31.0.0/16 overlaps 172.31.0.0/16 of network \"docker-0123\"")
	td.fails("NetworkDriver.CreateNetwork", dualStack(strings.Repeat("0b", 32), nil), "overlaps")
	f.failNext = model.Fieldf("masquerade", "kernel mode has no NAT (plain routing)")
	td.fails("NetworkDriver.CreateNetwork", dualStack(strings.Repeat("0d", 32), map[string]any{optMode: "kernel"}),
		"outbound masquerade (on by default, as on Docker's bridge; off with -o com.docker.network.bridge.enable_ip_masquerade=false): kernel mode has no NAT")
	if m := f.creates[len(f.creates)-1].Masquerade; m == nil || !*m {
		t.Errorf("masquerade not asked for by default")
	}
	var recs []store.DockerNetwork
	f.st.View(func(tx *store.Tx) error { recs, _ = tx.DockerNetworks(); return nil })
	if len(recs) != 1 || recs[0].Network != "docker-"+netID[:12] || recs[0].IfPrefix != "net" || !recs[0].EnableIPv6 {
		t.Errorf("records after failures: %+v, want only the first network", recs)
	}
}

func TestEndpointLifecycle(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	td.ok("NetworkDriver.CreateNetwork", dualStack(netID, nil))

	// Docker's IPAM chose the addresses: the answer is an empty Interface.
	out := td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{
		NetworkID: netID, EndpointID: epID,
		Interface: &endpointInterface{Address: "172.30.0.5/16", AddressIPv6: "fd00:30::5/64", MacAddress: "02:42:ac:1e:00:05"},
	})
	if out["Interface"] != nil {
		t.Errorf("CreateEndpoint answered %v, want no Interface", out)
	}
	wantAdd := api.EndpointAdd{ID: epID, Network: "docker-" + netID[:12], VethOnly: true, IPs: []string{"172.30.0.5", "fd00:30::5"}, MAC: "02:42:ac:1e:00:05"}
	if !reflect.DeepEqual(f.adds[0], wantAdd) {
		t.Errorf("endpoint add\n got %+v\nwant %+v", f.adds[0], wantAdd)
	}
	// A retry finds it there. Docker gave addresses but no MAC: the
	// answer is the MAC alone (libnetwork refuses a driver that answers
	// what it gave), so docker inspect shows it.
	out = td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: &endpointInterface{Address: "172.30.0.5/16"}})
	if want := map[string]any{"MacAddress": "02:42:ac:1e:00:05"}; !reflect.DeepEqual(out["Interface"], want) {
		t.Errorf("CreateEndpoint with addresses, without a MAC, answered %v, want Interface %v", out, want)
	}

	// No addresses from Docker: xlane's IPAM chooses and says so.
	out = td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID2, Interface: &endpointInterface{}})
	if want := map[string]any{"Address": "172.30.0.2/16", "AddressIPv6": "fd00:30::2/64", "MacAddress": "02:00:00:00:00:07"}; !reflect.DeepEqual(out["Interface"], want) {
		t.Errorf("CreateEndpoint without addresses answered %v, want Interface %v", out, want)
	}

	out = td.ok("NetworkDriver.Join", joinRequest{NetworkID: netID, EndpointID: epID, SandboxKey: "/var/run/docker/netns/x"})
	want := map[string]any{
		"InterfaceName": map[string]any{"SrcName": "xlc" + epID[:10], "DstPrefix": "eth"},
		"Gateway":       "172.30.0.1",
		"GatewayIPv6":   "fd00:30::1",
		"StaticRoutes": []any{
			map[string]any{"Destination": "fd00:30::1/128", "RouteType": 1.0},
			map[string]any{"Destination": "fd00:30::/65", "RouteType": 0.0, "NextHop": "fd00:30::1"},
			map[string]any{"Destination": "fd00:30:0:0:8000::/65", "RouteType": 0.0, "NextHop": "fd00:30::1"},
		},
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("Join\n got %v\nwant %v", out, want)
	}
	out = td.ok("NetworkDriver.EndpointOperInfo", endpointRequest{NetworkID: netID, EndpointID: epID})
	if v, _ := out["Value"].(map[string]any); v["com.docker.network.endpoint.macaddress"] != "02:42:ac:1e:00:05" || v["xlane.host_ifname"] != "xlh"+epID[:10] {
		t.Errorf("EndpointOperInfo: %v", out)
	}

	for _, c := range []struct{ binding, want string }{
		{`{"Proto":6,"Port":80,"HostIP":"localhost","HostPort":8080}`, `host address "localhost" from Docker: not an address`},
		{`{"Proto":132,"Port":80,"HostPort":8080}`, "tcp and udp ports only"},
	} {
		var b any
		json.Unmarshal([]byte(c.binding), &b)
		td.fails("NetworkDriver.ProgramExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID,
			Options: map[string]any{optPortMap: []any{b}}}, c.want)
	}
	td.ok("NetworkDriver.ProgramExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID, Options: map[string]any{
		optExposedPorts: []any{map[string]any{"Proto": 6, "Port": 80}},
		optPortMap: []any{
			map[string]any{"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 8080, "HostPortEnd": 8080},
			map[string]any{"Proto": 6, "IP": "", "Port": 80, "HostIP": "::", "HostPort": 8080, "HostPortEnd": 8080},
			map[string]any{"Proto": 17, "IP": "", "Port": 53, "HostIP": "0.0.0.0", "HostPort": 5353},
		},
	}})
	if got := fmt.Sprint(f.eps[epID].Ports); got != "[8080:80/tcp 5353:53/udp]" {
		t.Errorf("published ports %s, want 8080:80/tcp 5353:53/udp", got)
	}
	if want := map[string]bool{":8080->172.30.0.5:80": true, "udp :5353->172.30.0.5:53": true}; !reflect.DeepEqual(td.proxied, want) {
		t.Errorf("node-local relays %v, want %v", td.proxied, want)
	}

	// A restarted xlaned answers the same from its state file.
	td2 := newTestDriver(t, f)
	if again := td2.ok("NetworkDriver.Join", joinRequest{NetworkID: netID, EndpointID: epID}); !reflect.DeepEqual(again, want) {
		t.Errorf("Join after restart\n got %v\nwant %v", again, want)
	}
	var de *store.DockerEndpoint
	f.st.View(func(tx *store.Tx) error { de, _ = tx.DockerEndpoint(epID); return nil })
	if de == nil || string(de.ExposedPorts) != `[{"Port":80,"Proto":6}]` || len(de.Ports) != 2 {
		t.Errorf("endpoint record %+v, want the exposed and published ports kept", de)
	}
	if err := td2.dr.Resume(); err != nil || len(td2.proxied) != 2 {
		t.Errorf("Resume: %v, relays %v, want the published port relayed again", err, td2.proxied)
	}
	td2.ok("NetworkDriver.RevokeExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID})
	td2.ok("NetworkDriver.RevokeExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID})
	if len(f.eps[epID].Ports) != 0 || len(td2.proxied) != 0 {
		t.Errorf("ports %v, relays %v left after RevokeExternalConnectivity", f.eps[epID].Ports, td2.proxied)
	}

	td2.ok("NetworkDriver.Leave", endpointRequest{NetworkID: netID, EndpointID: epID})
	td2.ok("NetworkDriver.DeleteEndpoint", endpointRequest{NetworkID: netID, EndpointID: epID})
	td2.ok("NetworkDriver.DeleteEndpoint", endpointRequest{NetworkID: netID, EndpointID: epID}) // idempotent
	td2.fails("NetworkDriver.Join", joinRequest{NetworkID: netID, EndpointID: epID}, "not known to this xlaned")
	td2.ok("NetworkDriver.DeleteNetwork", networkRequest{NetworkID: netID})
	td2.ok("NetworkDriver.DeleteNetwork", networkRequest{NetworkID: netID})
	if len(f.nets) != 0 || len(f.eps) != 0 || td2.allowed != -1 {
		t.Errorf("after deletes: networks %v endpoints %v forwarding %d", f.nets, f.eps, td2.allowed)
	}
	f.st.View(func(tx *store.Tx) error {
		nets, _ := tx.DockerNetworks()
		eps, _ := tx.DockerEndpoints()
		if len(nets)+len(eps) != 0 {
			t.Errorf("records left: %v %v", nets, eps)
		}
		return nil
	})
	td2.fails("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID}, "not known to this xlaned")
}

func TestInternalNetworkJoin(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	req := dualStack(netID, nil)
	req.Options[optInternal] = true
	td.ok("NetworkDriver.CreateNetwork", req)
	if !f.creates[0].Internal {
		t.Errorf("internal not passed on: %+v", f.creates[0])
	}
	td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: &endpointInterface{Address: "172.30.0.5/16", AddressIPv6: "fd00:30::5/64"}})
	// A gateway, as from Docker 20.10's bridge: the policy rules let it
	// reach only the node.
	out := td.ok("NetworkDriver.Join", joinRequest{NetworkID: netID, EndpointID: epID})
	if out["Gateway"] != "172.30.0.1" || out["GatewayIPv6"] != "fd00:30::1" || len(out["StaticRoutes"].([]any)) != 3 {
		t.Errorf("Join on an internal network: %v, want the gateways, the IPv6 peer routes", out)
	}
	// gateway_mode_ipv6=isolated: no IPv6 gateway.
	netID2 := strings.Repeat("cd", 32)
	req = dualStack(netID2, map[string]any{optGatewayMode6: "isolated"})
	req.Options[optInternal] = true
	req.IPv4Data = []ipamData{{Pool: "172.31.0.0/16", Gateway: "172.31.0.1/16"}}
	req.IPv6Data = []ipamData{{Pool: "fd00:31::/64", Gateway: "fd00:31::1/64"}}
	td.ok("NetworkDriver.CreateNetwork", req)
	td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID2, EndpointID: epID2, Interface: &endpointInterface{Address: "172.31.0.5/16", AddressIPv6: "fd00:31::5/64"}})
	out = td.ok("NetworkDriver.Join", joinRequest{NetworkID: netID2, EndpointID: epID2})
	if out["Gateway"] != "172.31.0.1" || out["GatewayIPv6"] != nil {
		t.Errorf("Join with gateway_mode_ipv6=isolated: %v, want the IPv4 gateway only", out)
	}
}

// TestGatewayModes: routed turns masquerade off (every family the network
// has, or refused); isolated needs --internal.
func TestGatewayModes(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	last := func() api.NetworkCreate { return f.creates[len(f.creates)-1] }
	id := func(b string) string { return strings.Repeat(b, 32) }
	v4 := func(i string, opts map[string]any) createNetworkRequest {
		return createNetworkRequest{NetworkID: id(i), IPv4Data: []ipamData{{Pool: "10.7" + i[1:] + ".0.0/24"}}, Options: map[string]any{optGeneric: opts}}
	}
	td.ok("NetworkDriver.CreateNetwork", v4("c1", map[string]any{optGatewayMode4: "routed"}))
	if m := last().Masquerade; m == nil || *m {
		t.Errorf("routed IPv4-only network: masquerade %v, want off", m)
	}
	td.ok("NetworkDriver.CreateNetwork", v4("c2", map[string]any{optGatewayMode4: "nat"}))
	if m := last().Masquerade; m == nil || !*m {
		t.Errorf("nat network: masquerade %v, want on", m)
	}
	req := dualStack(id("c3"), map[string]any{optGatewayMode4: "routed", optGatewayMode6: "routed"})
	td.ok("NetworkDriver.CreateNetwork", req)
	if m := last().Masquerade; m == nil || *m {
		t.Errorf("routed dual-stack network: masquerade %v, want off", m)
	}
	td.fails("NetworkDriver.CreateNetwork", dualStack(id("c4"), map[string]any{optGatewayMode4: "routed"}),
		"gateway_mode_ipv4=routed, com.docker.network.bridge.gateway_mode_ipv6=nat: xlane masquerades a network's families together")
	td.fails("NetworkDriver.CreateNetwork", v4("c5", map[string]any{optGatewayMode4: "isolated"}),
		"gateway_mode_ipv4=isolated: only for an internal network (--internal)")
	td.fails("NetworkDriver.CreateNetwork", v4("c6", map[string]any{optGatewayMode4: "routed", optMasquerade: "true"}),
		"enable_ip_masquerade=true contradicts gateway mode routed")
	td.fails("NetworkDriver.CreateNetwork", v4("c7", map[string]any{optHostBinding: "localhost"}),
		`host_binding_ipv4="localhost": want an address`)
}

func TestOnLinkV6Routes(t *testing.T) {
	for _, c := range []struct{ subnet, gw, lo, hi string }{
		{"fd00:1::/64", "fd00:1::1", "fd00:1::/65", "fd00:1:0:0:8000::/65"},
		{"fd00:1::/48", "fd00:1::1", "fd00:1::/49", "fd00:1:0:8000::/49"},
		{"fd00:1::/126", "fd00:1::1", "fd00:1::/127", "fd00:1::2/127"},
	} {
		got := onLinkV6Routes(netip.MustParsePrefix(c.subnet), netip.MustParseAddr(c.gw))
		var dsts []string
		for _, r := range got {
			dsts = append(dsts, r.Destination)
		}
		want := []string{c.gw + "/128", c.lo, c.hi}
		if !slices.Equal(dsts, want) || got[0].RouteType != routeConnected || got[1].NextHop != c.gw {
			t.Errorf("%s: %+v, want %v", c.subnet, got, want)
		}
	}
}

func TestNetworkName(t *testing.T) {
	if got := NetworkName(netID); got != "docker-abababababab" {
		t.Errorf("NetworkName = %q", got)
	}
	if got := fmt.Sprint(len(NetworkName(netID))); got != "19" {
		t.Errorf("length %s", got)
	}
}

// TestCreateNetworkPolicy: ICC off and isolation from other networks map
// onto the xlane network's icc and isolated properties; Docker networks
// are isolated by default (as bridge networks are), except in kernel mode,
// which has no datapath for it.
func TestCreateNetworkPolicy(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	last := func() api.NetworkCreate { return f.creates[len(f.creates)-1] }
	id := func(b string) string { return strings.Repeat(b, 32) }

	td.ok("NetworkDriver.CreateNetwork", dualStack(id("a1"), nil))
	if c := last(); c.ICC != nil || !c.Isolated {
		t.Errorf("default network: icc %v isolated %v, want icc unset (on) and isolated", c.ICC, c.Isolated)
	}
	td.ok("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a2"), IPv4Data: []ipamData{{Pool: "10.62.0.0/24", Gateway: "10.62.0.1/24"}},
		Options: map[string]any{optGeneric: map[string]any{optICC: "false"}}})
	if c := last(); c.ICC == nil || *c.ICC || !c.Isolated {
		t.Errorf("enable_icc=false: icc %v isolated %v, want icc false and isolated", c.ICC, c.Isolated)
	}
	if n := f.nets["docker-"+id("a2")[:12]]; n == nil || !n.ICCOff || !n.Isolated {
		t.Errorf("xlane network of the ICC-off Docker network: %+v", n)
	}
	var rec store.DockerNetwork
	f.st.View(func(tx *store.Tx) error {
		recs, _ := tx.DockerNetworks()
		for _, r := range recs {
			if r.ID == id("a2") {
				rec = r
			}
		}
		return nil
	})
	if rec.ID == "" || rec.ICC {
		t.Errorf("record of the ICC-off network: %+v, want ICC false", rec)
	}
	// Docker retries: the same ICC-off network again is fine.
	td.ok("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a2"), IPv4Data: []ipamData{{Pool: "10.62.0.0/24", Gateway: "10.62.0.1/24"}},
		Options: map[string]any{optGeneric: map[string]any{optICC: "false"}}})

	td.ok("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a3"), IPv4Data: []ipamData{{Pool: "10.63.0.0/24"}},
		Options: map[string]any{optGeneric: map[string]any{optIsolated: "false"}}})
	if c := last(); c.Isolated {
		t.Errorf("xlane.isolated=false: isolated")
	}
	td.ok("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a4"), IPv4Data: []ipamData{{Pool: "10.64.0.0/24"}},
		Options: map[string]any{optGeneric: map[string]any{optMode: "kernel", optMasquerade: "false"}}})
	if c := last(); c.Isolated {
		t.Errorf("kernel mode: isolated asked for, want not (kernel mode cannot)")
	}

	// The daemon's refusals, in Docker's terms.
	f.failNext = model.Fieldf("icc", "mode kernel has no datapath to keep the network's endpoints apart (ICC off): use a BPF mode (tc, xdp, xdp-generic)")
	td.fails("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a5"), IPv4Data: []ipamData{{Pool: "10.65.0.0/24"}},
		Options: map[string]any{optGeneric: map[string]any{optMode: "kernel", optMasquerade: "false", optICC: "false"}}},
		"option com.docker.network.bridge.enable_icc=false: mode kernel has no datapath to keep the network's endpoints apart (ICC off)")
	f.failNext = model.Fieldf("isolated", "mode kernel has no datapath to keep the network apart from others")
	td.fails("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("a6"), IPv4Data: []ipamData{{Pool: "10.66.0.0/24"}},
		Options: map[string]any{optGeneric: map[string]any{optMasquerade: "false"}}},
		"isolation from other networks (on by default, as between Docker's bridge networks; off with -o xlane.isolated=false): mode kernel has no datapath")
}

// TestCreateNetworkUnsolicited: Docker's gateway_mode nat-unprotected (no
// port filtering) opens the xlane network to flows from off the node; the
// other modes keep Docker's filtering, xlane's default.
func TestCreateNetworkUnsolicited(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	last := func() api.NetworkCreate { return f.creates[len(f.creates)-1] }
	id := func(b string) string { return strings.Repeat(b, 32) }
	for i, tc := range []struct {
		opts map[string]any
		want bool
	}{
		{nil, false},
		{map[string]any{optGatewayMode4: "nat"}, false},
		{map[string]any{optGatewayMode4: "routed"}, false},
		{map[string]any{optGatewayMode4: "nat-unprotected"}, true},
		{map[string]any{optGatewayMode6: "nat-unprotected"}, true},
	} {
		td.ok("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id(fmt.Sprintf("b%d", i)),
			IPv4Data: []ipamData{{Pool: fmt.Sprintf("10.7%d.0.0/24", i)}}, Options: map[string]any{optGeneric: tc.opts}})
		if got := last().AllowUnsolicited; got != tc.want {
			t.Errorf("options %v: allow unsolicited %v, want %v", tc.opts, got, tc.want)
		}
	}
	td.fails("NetworkDriver.CreateNetwork", createNetworkRequest{NetworkID: id("b9"), IPv4Data: []ipamData{{Pool: "10.79.0.0/24"}},
		Options: map[string]any{optGeneric: map[string]any{optGatewayMode4: "open"}}}, `gateway_mode_ipv4="open": want nat, nat-unprotected, routed or isolated`)
}

// TestPortForms: -p PORT and -P get a host port xlane chooses below the
// node's ip_local_port_range (kept on a repeated call), -p
// 127.0.0.1:8082:80 and [::1] a relay on that address only, a host port
// range its first free port.
func TestPortForms(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	td.ok("NetworkDriver.CreateNetwork", dualStack(netID, nil))
	td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: &endpointInterface{Address: "172.30.0.5/16", AddressIPv6: "fd00:30::5/64"}})
	req := externalConnectivityRequest{NetworkID: netID, EndpointID: epID, Options: map[string]any{optPortMap: []any{
		map[string]any{"Proto": 6, "Port": 80, "HostIP": "", "HostPort": 0},
		map[string]any{"Proto": 6, "Port": 80, "HostIP": "::", "HostPort": 0},
		map[string]any{"Proto": 6, "Port": 81, "HostIP": "127.0.0.1", "HostPort": 8082},
		map[string]any{"Proto": 6, "Port": 81, "HostIP": "::1", "HostPort": 8083},
		map[string]any{"Proto": 17, "Port": 54, "HostIP": "127.0.0.1", "HostPort": 5354},
		map[string]any{"Proto": 17, "Port": 53, "HostPort": 45300, "HostPortEnd": 45310},
	}}}
	td.ok("NetworkDriver.ProgramExternalConnectivity", req)
	ports := f.eps[epID].Ports
	lo, hi := ephemeralPorts()
	if len(ports) != 2 || ports[0].Port != 80 || int(ports[0].NodePort) < lo || int(ports[0].NodePort) > hi || ports[1].String() != "45300:53/udp" {
		t.Fatalf("published %v, want 80/tcp on a port of %d-%d and 45300:53/udp", ports, lo, hi)
	}
	want := map[string]bool{
		fmt.Sprintf(":%d->172.30.0.5:80", ports[0].NodePort): true,
		"127.0.0.1:8082->172.30.0.5:81":                      true,
		"[::1]:8083->172.30.0.5:81":                          true,
		"udp 127.0.0.1:5354->172.30.0.5:54":                  true,
		"udp :45300->172.30.0.5:53":                          true,
	}
	if !reflect.DeepEqual(td.proxied, want) {
		t.Errorf("relays %v, want %v", td.proxied, want)
	}
	// Docker calls again (a restart): the chosen port stays.
	td.ok("NetworkDriver.ProgramExternalConnectivity", req)
	if again := f.eps[epID].Ports; !reflect.DeepEqual(again, ports) {
		t.Errorf("published %v on the second call, want %v kept", again, ports)
	}
	td.ok("NetworkDriver.RevokeExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID})
	if len(f.eps[epID].Ports) != 0 || len(td.proxied) != 0 {
		t.Errorf("ports %v, relays %v left after RevokeExternalConnectivity", f.eps[epID].Ports, td.proxied)
	}
}

// TestPortFormsChangedMapping: a port Docker gives is used as given even
// when the record holds another for the same container port, which is
// withdrawn.
func TestPortFormsChangedMapping(t *testing.T) {
	f := newFake(t)
	td := newTestDriver(t, f)
	td.ok("NetworkDriver.CreateNetwork", dualStack(netID, nil))
	td.ok("NetworkDriver.CreateEndpoint", createEndpointRequest{NetworkID: netID, EndpointID: epID, Interface: &endpointInterface{Address: "172.30.0.5/16"}})
	for _, hp := range []int{8080, 9090} {
		td.ok("NetworkDriver.ProgramExternalConnectivity", externalConnectivityRequest{NetworkID: netID, EndpointID: epID, Options: map[string]any{optPortMap: []any{
			map[string]any{"Proto": 6, "Port": 80, "HostPort": hp},
		}}})
		if got, want := fmt.Sprint(f.eps[epID].Ports), fmt.Sprintf("[%d:80/tcp]", hp); got != want {
			t.Errorf("-p %d:80: published %s, want %s", hp, got, want)
		}
	}
}
