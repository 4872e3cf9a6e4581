package daemon

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/cluster"
)

func readSysctl(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeSysctl(t *testing.T, p, v string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+p, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

// `xlaned --uninstall` puts back the IPv6 forwarding sysctls a network
// with an IPv6 subnet turned on (all, default and every interface's, which
// writing "all" changes too); a failed create puts them back at once.
func TestUninstallRestoresSysctls(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "fw0"}, PeerName: "fw0p"}); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"net/ipv6/conf/all/forwarding":     "0",
			"net/ipv6/conf/default/forwarding": "0",
			"net/ipv6/conf/fw0/forwarding":     "1", // the admin's, per interface
			"net/ipv6/conf/fw0p/forwarding":    "0",
		}
		writeSysctl(t, "net/ipv6/conf/all/forwarding", "0")
		writeSysctl(t, "net/ipv6/conf/default/forwarding", "0")
		writeSysctl(t, "net/ipv6/conf/fw0/forwarding", "1")
		check := func(when string) {
			t.Helper()
			for k, v := range want {
				if got := readSysctl(t, k); got != v {
					t.Errorf("%s: %s = %s, want %s", when, k, got, v)
				}
			}
		}

		// A create that fails after turning forwarding on turns it off.
		d.faults.Hook = func(s string) error {
			if s == "network-applied" {
				return errInjected
			}
			return nil
		}
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "doomed", Subnets: []string{"fd00:58::/64"}}); err == nil {
			t.Fatal("create with an injected failure succeeded")
		}
		d.faults.Hook = nil
		check("after a failed create")

		for _, name := range []string{"v6", "v6b"} {
			sub := map[string]string{"v6": "fd00:58::/64", "v6b": "fd00:59::/64"}[name]
			if _, err := d.CreateNetwork(api.NetworkCreate{Name: name, Subnets: []string{sub}}); err != nil {
				t.Fatal(err)
			}
		}
		if got := readSysctl(t, "net/ipv6/conf/all/forwarding"); got != "1" {
			t.Fatalf("IPv6 network made: all.forwarding = %s, want 1", got)
		}
		if _, err := d.AddEndpoint(api.EndpointAdd{Network: "v6", Netns: container(t)}); err != nil {
			t.Fatal(err)
		}
		if err := d.Uninstall(); err != nil {
			t.Fatal(err)
		}
		check("after uninstall")
	})
}

// With native routing, adding this node turns IPv4 forwarding on on the
// device that carries its underlay address (peers' pods' packets come in
// there); `xlaned --uninstall` puts the value from before back, also where
// that device is not the uplink (this daemon has none).
func TestUninstallRestoresUnderlayForwarding(t *testing.T) {
	cfg := Config{Cluster: cluster.Config{NodeName: "n1", ClusterCIDRs: []string{"10.244.0.0/16"}, Routing: "native"}}
	inNodeWith(t, cfg, func(d *Daemon) {
		ul := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "und0"}, PeerName: "und0p"}
		if err := netlink.LinkAdd(ul); err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(ul, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.10"), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(ul); err != nil {
			t.Fatal(err)
		}
		const key = "net/ipv4/conf/und0/forwarding"
		writeSysctl(t, key, "0")
		// A request that fails validation changes nothing.
		if _, err := addNode(d, api.NodeAdd{Name: "n1", Underlay: []string{"192.0.2.10"}, PodCIDRs: []string{"10.99.0.0/24"}}); err == nil {
			t.Fatal("a pod CIDR outside the cluster CIDR was accepted")
		}
		if got := readSysctl(t, key); got != "0" {
			t.Fatalf("after a refused node add: %s = %s, want 0", key, got)
		}
		if _, err := addNode(d, api.NodeAdd{Name: "n1", Underlay: []string{"192.0.2.10"}, PodCIDRs: []string{"10.244.1.0/24"}}); err != nil {
			t.Fatal(err)
		}
		if got := readSysctl(t, key); got != "1" {
			t.Fatalf("native routing, this node added: %s = %s, want 1", key, got)
		}
		if err := d.Uninstall(); err != nil {
			t.Fatal(err)
		}
		if got := readSysctl(t, key); got != "0" {
			t.Errorf("after uninstall: %s = %s, want the 0 from before", key, got)
		}
	})
}
