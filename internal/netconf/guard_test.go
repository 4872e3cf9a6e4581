package netconf

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/xlane-dev/xlane/internal/model"
)

// On a node of a cluster, the kernel-mode guard accepts the cluster's
// pods (other nodes') before it drops unsolicited traffic to the subnets;
// alone, it has no such line.
func TestGuardScriptCluster(t *testing.T) {
	n := &model.Network{ID: 7, Mode: model.ModeKernel,
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24"), netip.MustParsePrefix("fd00:244:0:3::/64")}}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/48")}
	s := guardScript(n, cluster)
	for _, want := range []string{"ip saddr 10.244.0.0/16 accept", "ip6 saddr fd00:244::/48 accept"} {
		i, drop := strings.Index(s, want), strings.Index(s, "counter drop")
		if i < 0 || drop < 0 || i > drop {
			t.Errorf("script lacks %q before the drop:\n%s", want, s)
		}
	}
	if s := guardScript(n, nil); strings.Contains(s, "saddr") {
		t.Errorf("a lone node's guard accepts by source:\n%s", s)
	}
}

// Beside a large ruleset of another owner (iptables-nft, as kube-proxy
// writes), the guard tables are listed, pruned and deleted without nft
// building its cache of every rule: PruneGuards keeps the tables of the
// networks it is given and other inet tables, deletes the rest, and
// listing costs a fraction of `nft list tables inet` (which took over 11
// minutes beside rules for 100,000 services).
func TestGuardTablesBesideLargeRuleset(t *testing.T) {
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	var rules strings.Builder
	rules.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n")
	const n = 10000
	for i := 0; i < n; i++ {
		fmt.Fprintf(&rules, ":S%d - [0:0]\n-A PREROUTING -d 10.%d.%d.%d/32 -p tcp --dport 80 -j S%d\n-A S%d -p tcp -j DNAT --to-destination 10.200.0.1:80\n",
			i, i>>16, (i>>8)&255, i&255, i, i)
	}
	rules.WriteString("COMMIT\n")
	err = node.Do(func(ns.NetNS) error {
		restore := exec.Command("iptables-nft-restore")
		restore.Stdin = strings.NewReader(rules.String())
		if out, err := restore.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-nft-restore: %v: %s", err, out)
		}
		if err := nft("table inet other {\n}\n"); err != nil {
			return err
		}
		nets := []model.Network{
			{ID: 3, Mode: model.ModeKernel, Subnets: []netip.Prefix{netip.MustParsePrefix("10.73.0.0/24")}},
			{ID: 5, Mode: model.ModeKernel, Subnets: []netip.Prefix{netip.MustParsePrefix("10.75.0.0/24")}},
		}
		for i := range nets {
			if err := EnsureGuard(&nets[i], nil); err != nil {
				return err
			}
		}
		start := time.Now()
		have, err := guardTables()
		took := time.Since(start)
		if err != nil {
			return err
		}
		if len(have) != 2 || !have["xlane_guard3"] || !have["xlane_guard5"] {
			t.Errorf("guardTables = %v, want xlane_guard3 and xlane_guard5", have)
		}
		start = time.Now()
		if out, err := exec.Command("nft", "list", "tables", "inet").CombinedOutput(); err != nil {
			return fmt.Errorf("nft list tables: %v: %s", err, out)
		}
		if nftTook := time.Since(start); took*4 > nftTook {
			t.Errorf("guardTables took %v beside %d iptables-nft rules, nft list tables %v: want under a quarter", took, 2*n, nftTook)
		} else {
			t.Logf("guardTables %v, nft list tables %v, beside %d iptables-nft rules", took, nftTook, 2*n)
		}
		if err := PruneGuards(nets[:1]); err != nil {
			return err
		}
		out, err := exec.Command("nft", "list", "tables", "inet").CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft list tables: %v: %s", err, out)
		}
		if s := string(out); !strings.Contains(s, "xlane_guard3") || strings.Contains(s, "xlane_guard5") || !strings.Contains(s, "table inet other") {
			t.Errorf("after PruneGuards(network 3): %q, want xlane_guard3 and other, not xlane_guard5", s)
		}
		// Deleting a table that is gone succeeds (DeleteNetwork after a crash).
		for i := 0; i < 2; i++ {
			if err := DeleteGuard(&nets[0]); err != nil {
				t.Errorf("DeleteGuard, time %d: %v", i+1, err)
			}
		}
		if have, err := guardTables(); err != nil || len(have) != 0 {
			t.Errorf("guardTables after DeleteGuard = %v, %v; want none", have, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
