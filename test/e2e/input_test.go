package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// A word that is not a flag ends Go's flag parsing: xlaned refuses it
// instead of starting without the flags after it (here --uplink).
func TestXlanedRefusesPositionalArgs(t *testing.T) {
	netns := newNetns(t, "args")
	dir := t.TempDir()
	socket := filepath.Join(dir, "xlane.sock")
	pinDir := "/sys/fs/bpf/xle-" + suffix()
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	cmd := inNS(netns, filepath.Join(binDir, "xlaned"), "--state", filepath.Join(dir, "state.db"), "--socket", socket,
		"--pin-dir", pinDir, "--docker-plugin-socket=", "--calibrate-at-start=false",
		"--metrics-addr", "127.0.0.1:9643", "stray", "--uplink", "xle-no-such-dev")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("xlaned with a stray argument exited 0:\n%s", &out)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("xlaned with a stray argument started (it ignored the flags after it):\n%s", &out)
	}
	if want := `unexpected argument "stray"`; !strings.Contains(out.String(), want) {
		t.Errorf("xlaned output %q, want it to contain %q", &out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err == nil {
		t.Errorf("xlaned created its state file before refusing its arguments")
	}
}

// CNI ADD with CNI_NETNS the plugin's own namespace (the node's, where
// xlaned runs too) or the machine's root namespace is refused with the
// spec's error 4 naming CNI_NETNS, before anything is made: no network,
// no attachment, no device, and the plugin prints nothing but the error.
func TestCNIAddOwnNetns(t *testing.T) {
	n := newNode(t)
	xnet := "own" + suffix()
	conf := `{"cniVersion":"1.1.0","name":"own","type":"xlane-cni","socket":"` + n.socket + `","network":"` + xnet +
		`","subnets":["10.213.0.0/24","fd00:213::/64"]}`
	before := runIn(t, n.netns, "ip", "-o", "link")
	// The runtime (and so the plugin) in a namespace of its own, not
	// xlaned's: only the plugin knows it is its own.
	runtimeNS := newNetns(t, "rt")
	for _, tc := range []struct{ name, pluginNS, netns string }{
		{"node's", n.netns, nsPath(n.netns)},
		{"self", n.netns, "/proc/self/ns/net"},
		{"root", n.netns, "/proc/1/ns/net"},
		{"runtime's", runtimeNS, nsPath(runtimeNS)},
	} {
		netns := tc.netns
		t.Run(tc.name, func(t *testing.T) {
			c := inNS(tc.pluginNS, filepath.Join(binDir, "xlane-cni"))
			c.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=ctr-own", "CNI_NETNS="+netns,
				"CNI_IFNAME=eth0", "CNI_PATH="+binDir)
			c.Stdin = strings.NewReader(conf)
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Run(); err == nil {
				t.Fatalf("ADD with CNI_NETNS=%s succeeded: %s", netns, &stdout)
			}
			// Before: a success result, then an error, exit 1.
			var e types.Error
			dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
			if err := dec.Decode(&e); err != nil || dec.More() {
				t.Fatalf("ADD with CNI_NETNS=%s: stdout is not one spec error (%v): %q; stderr %q", netns, err, stdout.String(), &stderr)
			}
			if e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "CNI_NETNS") {
				t.Errorf("ADD with CNI_NETNS=%s: %+v, want code 4 naming CNI_NETNS", netns, e)
			}
		})
	}
	// xlaned refuses its own namespace itself (a client other than
	// xlane-cni), before it creates the network.
	_, err := n.client().AddAttachment(context.Background(), api.AttachmentAdd{ContainerID: "ctr-own", IfName: "eth0",
		Netns: nsPath(n.netns), CNINetwork: "own", Network: xnet, Create: &api.NetworkCreate{Subnets: []string{"10.213.0.0/24"}}})
	var re *api.RemoteError
	if !errors.As(err, &re) || re.Error_.Field != "netns" {
		t.Errorf("API attachment into xlaned's own namespace: %v, want an error of field netns", err)
	}
	if _, err := n.client().Attachment(context.Background(), "ctr-own", "eth0"); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("attachment after the refused ADDs: %v, want not found", err)
	}
	if _, err := n.client().Network(context.Background(), xnet); !errors.Is(err, model.ErrNotFound) {
		t.Errorf("network after the refused ADDs: %v, want not found (nothing made)", err)
	}
	if after := runIn(t, n.netns, "ip", "-o", "link"); after != before {
		t.Errorf("refused ADDs changed the node's links:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// Service VIPs that are no single service's unicast address are refused by
// `service create` and `service apply` (all or none), naming the field:
// 0.0.0.0:80 used to take the node's own connections to any local port 80
// to the backends.
func TestServiceVIPRefused(t *testing.T) {
	n := newNode(t)
	n.mustXlane(nil, "network", "create", "vipnet", "--subnet", "10.214.0.0/24")
	// A subnet of the node's own, with its broadcast address.
	runIn(t, n.netns, "ip", "addr", "add", "198.51.100.1/24", "brd", "+", "dev", "lo")
	for _, vip := range []string{
		"0.0.0.0:80", "[::]:80", "255.255.255.255:80/udp", "224.0.0.251:5353/udp", "[ff02::1]:80",
		"127.0.0.1:80", "[::1]:80", "169.254.169.254:80", "[fe80::1]:80",
		"10.214.0.255:80", "198.51.100.255:80/udp",
	} {
		backend := "10.214.0.2:8080"
		if strings.HasPrefix(vip, "[") {
			backend = "[fd00:214::2]:8080"
		}
		_, stderr, err := n.xlane("service", "create", "bad", "--vip", vip, "--backend", backend)
		if err == nil || !strings.Contains(stderr, "Error: vip ") {
			t.Errorf("service create --vip %s: %v %q, want an error naming vip", vip, err, stderr)
		}
		file := filepath.Join(t.TempDir(), "svcs.json")
		os.WriteFile(file, []byte(`[{"name": "good", "vip": "10.96.0.1:80", "backends": ["10.214.0.2:8080"]},
			{"name": "bad", "vip": "`+vip+`", "backends": ["`+backend+`"]}]`), 0o644)
		if _, stderr, err := n.xlane("service", "apply", "-f", file); err == nil || !strings.Contains(stderr, "services[1]") || !strings.Contains(stderr, "vip") {
			t.Errorf("service apply with VIP %s: %v %q, want an error naming services[1]", vip, err, stderr)
		}
	}
	var svcs []model.Service
	n.mustXlane(&svcs, "service", "ls")
	if len(svcs) != 0 {
		t.Errorf("services after refused requests: %+v", svcs)
	}
}

// The uplink blocklist refuses prefixes that cut the node off (every
// source, its own addresses, its default gateway), naming the field and
// the value, and adds nothing of the request; narrower prefixes are taken.
func TestBlocklistRefusesSelfHarm(t *testing.T) {
	var out string
	n := newNode(t, withOutside(&out, "1500"))
	for _, tc := range []struct{ prefix, says string }{
		{"0.0.0.0/0", "every source"},
		{"::/0", "every source"},
		{"192.0.2.0/24", "192.0.2.2"},
		{"192.0.2.1", "default gateway 192.0.2.1"},
		{"2001:db8:83::/64", "2001:db8:83::2"},
	} {
		_, stderr, err := n.xlane("fw", "block", "add", "198.51.100.0/24", tc.prefix)
		if err == nil || !strings.Contains(stderr, "add[1]") || !strings.Contains(stderr, tc.says) {
			t.Errorf("fw block add %s: %v %q, want an error naming add[1] and %q", tc.prefix, err, stderr, tc.says)
		}
	}
	var bl api.FirewallBlocklist
	n.mustXlane(&bl, "fw", "block", "ls")
	if bl.Count != 0 {
		t.Errorf("blocklist holds %d prefixes after refused requests, want 0", bl.Count)
	}
	// A network's subnet (its gateway is the node's, on lo): spoofed
	// sources on the uplink, fine to block.
	n.mustXlane(nil, "network", "create", "bl", "--subnet", "10.216.0.0/24")
	n.mustXlane(&bl, "fw", "block", "add", "198.51.100.0/24", "192.0.2.3/32", "10.216.0.0/24")
	if bl.Count != 3 {
		t.Errorf("blocklist holds %d prefixes, want 3", bl.Count)
	}
	ping(t, out, netip.MustParseAddr("192.0.2.2")) // the node still hears its gateway
}

// API errors name the JSON key of the request (the node API said pod-cidr
// for pod_cidrs; networks said subnet for subnets, endpoints ip for ips).
func TestAPIErrorFieldsAreJSONKeys(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	cl := n.client()
	c := newNetns(t, "c")
	field := func(err error) string {
		var re *api.RemoteError
		if !errors.As(err, &re) {
			return fmt.Sprintf("not an API error: %v", err)
		}
		return re.Error_.Field
	}
	if _, err := cl.CreateNetwork(ctx, api.NetworkCreate{Name: "f"}); field(err) != "subnets" {
		t.Errorf("network without subnets: field %q, want subnets", field(err))
	}
	if _, err := cl.CreateNetwork(ctx, api.NetworkCreate{Name: "f", Subnets: []string{"10.215.0.0/24"}, Gateways: []string{"10.9.0.1"}}); field(err) != "gateways" {
		t.Errorf("gateway outside: field %q, want gateways", field(err))
	}
	if _, err := cl.CreateNetwork(ctx, api.NetworkCreate{Name: "f", Subnets: []string{"10.215.0.0/24"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AddEndpoint(ctx, api.EndpointAdd{Network: "f", Netns: nsPath(c), IPs: []string{"10.9.0.5"}}); field(err) != "ips" {
		t.Errorf("endpoint ip outside: field %q, want ips", field(err))
	}
	if _, err := cl.CreateService(ctx, api.ServiceCreate{Name: "s", VIP: "10.96.0.1:80", Backends: []string{"nope"}}); field(err) != "backends" {
		t.Errorf("bad backend: field %q, want backends", field(err))
	}
	_, err := cl.ApplyServices(ctx, api.ServiceApply{Services: []api.ServiceCreate{{Name: "a", VIP: "10.96.0.1:80"}, {Name: "b", VIP: "0.0.0.0:80"}}})
	if field(err) != "services[1].vip" {
		t.Errorf("apply with a bad VIP: field %q, want services[1].vip", field(err))
	}
}
