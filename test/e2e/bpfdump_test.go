package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// `xlane bpf dump` reads every map xlaned lists, decoded: the endpoints
// with their devices, a UDP flow c0 -> c1 in conntrack, a service and its
// backends and Maglev table, a published port, the firewall's rule and
// its counter; an unknown name fails with the list of valid ones.
func TestBPFDump(t *testing.T) {
	n := newNode(t)
	requireMode(t, n, "tc")
	n.mustXlane(nil, "network", "create", "blue", "--subnet", "10.73.0.0/24", "--subnet", "fd00:73::/64", "--mode", "tc")
	var eps []api.EndpointInfo
	var cs []string
	for range 2 {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "blue", "--netns", c)
		eps, cs = append(eps, ep), append(cs, c)
	}
	n.mustXlane(nil, "service", "create", "web", "--vip", "10.96.7.7:80/tcp", "--backend", eps[0].IPs[0].String()+":8080", "--backend", eps[1].IPs[0].String()+":8080@0")
	n.mustXlane(nil, "endpoint", "publish", eps[1].ID, "--port", "8081:81/tcp")
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rules, []byte(fmt.Sprintf(`rules:
  - {name: deny-9999, scope: endpoint:%s, direction: from-endpoint, proto: udp, dport: 9999, action: drop}
`, eps[0].ID)), 0o600)
	n.mustXlane(nil, "fw", "apply", rules)
	// A UDP flow c0 -> c1:9998 (tracked) and a dropped one to 9999.
	dst := netip.AddrPortFrom(eps[1].IPs[0], 9998)
	srv, c := udpPair(t, cs[0], cs[1], dst)
	defer srv.Close()
	defer c.Close()
	c.Write([]byte("xlane dump"))
	srv.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, _, err := srv.ReadFrom(make([]byte, 64)); err != nil {
		t.Fatalf("udp to c1: %v", err)
	}
	ns.WithNetNSPath(nsPath(cs[0]), func(ns.NetNS) error {
		if u, err := net.Dial("udp", netip.AddrPortFrom(eps[1].IPs[0], 9999).String()); err == nil {
			u.Write([]byte("denied"))
			u.Close()
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)

	var maps []api.BPFMap
	n.mustXlane(&maps, "bpf", "maps")
	dumps := map[string]api.MapDump{}
	for _, m := range maps {
		var md api.MapDump
		n.mustXlane(&md, "bpf", "dump", m.Name, "--limit", "0")
		if len(md.Columns) == 0 || md.Count != len(md.Entries) {
			t.Errorf("dump %s: %d columns, count %d, %d entries", m.Name, len(md.Columns), md.Count, len(md.Entries))
		}
		for _, e := range md.Entries {
			if len(e) != len(md.Columns) {
				t.Errorf("dump %s: entry %v has not the columns %v", m.Name, e, md.Columns)
			}
		}
		if out, stderr, err := n.xlane("bpf", "dump", m.Name); err != nil || !strings.Contains(out, "entries of") {
			t.Errorf("xlane bpf dump %s (table): %v %s\n%s", m.Name, err, stderr, out)
		}
		dumps[m.Name] = md
	}
	has := func(name string, want map[string]string) {
		t.Helper()
		for _, e := range dumps[name].Entries {
			match := true
			for k, v := range want {
				if fmt.Sprint(e[k]) != v {
					match = false
				}
			}
			if match {
				return
			}
		}
		b, _ := json.MarshalIndent(dumps[name].Entries, "", " ")
		t.Errorf("dump %s: no entry with %v in\n%s", name, want, b)
	}
	for _, ep := range eps {
		for _, a := range ep.IPs {
			has("endpoints", map[string]string{"addr": a.String(), "device": ep.HostIf, "mac": ep.MAC})
		}
	}
	has("ct", map[string]string{"proto": "udp", "dst": dst.String(), "dir": "original"})
	has("ct", map[string]string{"proto": "udp", "src": dst.String(), "dir": "reply"})
	if !strings.HasPrefix(fmt.Sprint(dumps["ct"].Entries), "[") {
		t.Error("ct: no entries")
	}
	has("services", map[string]string{"vip": "10.96.7.7:80", "proto": "tcp"})
	has("backends", map[string]string{"index": "0", "backend": eps[0].IPs[0].String() + ":8080"})
	has("backends", map[string]string{"index": "1", "backend": eps[1].IPs[0].String() + ":8080"})
	has("maglev", map[string]string{"per_backend": "0:251"}) // the draining backend holds no slot; 2 backends: 251 slots
	has("publish", map[string]string{"proto": "tcp", "node_port": "8081", "target": eps[1].IPs[0].String() + ":81"})
	has("fw-state", map[string]string{"on": "true"})
	has("fw-rules", map[string]string{"action": "drop", "default": "false"})
	has("fw-counters", map[string]string{"packets": "1"})
	has("metrics", map[string]string{"device": eps[0].HostIf, "reason": "drop_fw", "direction": "from_endpoint", "packets": "1"})
	has("fw-scalar", map[string]string{"field": "dport", "from": "9999", "to": "9999"})
	if os.Getenv("XLANE_SHOW") != "" {
		for _, m := range maps {
			o, _, _ := n.xlane("bpf", "dump", m.Name, "--limit", "8")
			t.Logf("%s:\n%s", m.Name, o)
		}
	}

	_, stderr, err := n.xlane("bpf", "dump", "nosuch")
	if err == nil || !strings.Contains(stderr, `"nosuch"`) || !strings.Contains(stderr, "ct, nat, endpoints") {
		t.Errorf("dump of an unknown map: err %v, stderr %q; want an error listing the maps", err, stderr)
	}
}
