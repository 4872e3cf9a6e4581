package netconf

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/google/nftables"

	"github.com/xlane-dev/xlane/internal/model"
)

// Kernel mode runs no BPF, so what the datapath's unsolicited check does
// (bpf/lib/unsolicited.h: from off the node, only tracked flows get in)
// is an nftables table per kernel-mode network, as Docker's DOCKER chain
// does for a bridge:
//
//	table inet xlane_guard<ID>
//	  chain forward (hook forward, before iptables' filter table)
//	    iifname "xlh*" accept                 another endpoint of the node
//	    ip saddr CLUSTER accept               a pod of another node (cluster nodes)
//	    ip daddr SUBNET ct state established,related accept
//	    ip daddr SUBNET counter drop          unsolicited, counted
//
// On a node of a cluster (xlaned --cluster-cidr) the pods of the other
// nodes are of the cluster, not of the outside, as the BPF modes' check
// holds (peer_remote in bpf/lib/unsolicited.h): what comes from the
// cluster CIDRs (over the overlay, or natively routed) is accepted.
// The node's own packets are not forwarded and never meet it. A table of
// its own per network is replaced atomically, deleted whole, and loads
// conntrack only while a kernel-mode network needs it. A network with
// AllowUnsolicited, or in a BPF mode, has none.

const guardTablePrefix = "xlane_guard"

func guardTable(id uint32) string { return guardTablePrefix + strconv.FormatUint(uint64(id), 10) }

// guarded says whether n needs the table.
func guarded(n *model.Network) bool {
	return n.Mode == model.ModeKernel && !n.AllowUnsolicited
}

func nft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// guardScript replaces n's table (the empty "table" line makes the delete
// valid when there is none yet; one nft run is one transaction).
func guardScript(n *model.Network, cluster []netip.Prefix) string {
	t := guardTable(n.ID)
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", t, t, t)
	b.WriteString("  chain forward {\n    type filter hook forward priority filter - 1; policy accept;\n")
	b.WriteString("    iifname \"xlh*\" accept\n")
	for _, p := range cluster {
		fmt.Fprintf(&b, "    %s saddr %s accept\n", nftFamily(p), p.Masked())
	}
	for _, p := range n.Subnets {
		fam := nftFamily(p)
		fmt.Fprintf(&b, "    %s daddr %s ct state established,related accept\n", fam, p.Masked())
		fmt.Fprintf(&b, "    %s daddr %s counter drop comment \"xlane: unsolicited from off the node\"\n", fam, p.Masked())
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

func nftFamily(p netip.Prefix) string {
	if p.Addr().Is6() {
		return "ip6"
	}
	return "ip"
}

// EnsureGuard installs (or replaces) n's table when n needs one, and
// removes it otherwise; cluster: the cluster CIDRs on a node of a cluster
// (nil alone). Idempotent.
func EnsureGuard(n *model.Network, cluster []netip.Prefix) error {
	if !guarded(n) {
		return DeleteGuard(n)
	}
	if err := nft(guardScript(n, cluster)); err != nil {
		return fmt.Errorf("refuse unsolicited traffic to kernel-mode network %s (nftables): %w", n.Name, err)
	}
	return nil
}

// DeleteGuard removes n's table. Missing is fine, and so is a node without
// nft when there is nothing to remove.
func DeleteGuard(n *model.Network) error {
	return deleteGuardTable(guardTable(n.ID))
}

// deleteGuardTable deletes table t if it exists, in one nft run that
// lists nothing (the empty "table" line makes the delete valid when there
// is none).
func deleteGuardTable(t string) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil // no nft: no guard table was ever made
	}
	if err := nft(fmt.Sprintf("table inet %s\ndelete table inet %s\n", t, t)); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", t, err)
	}
	return nil
}

// guardTables lists xlane's guard tables (none without nft) with one
// netlink dump of the inet family's tables. Not `nft list tables`: nft
// builds its whole cache first, every rule of every table, which took
// 0.7 s beside 40,000 iptables-nft rules and ran for over 11 minutes
// (1 GB) beside kube-proxy-style rules for 100,000 services (bench nat).
func guardTables() (map[string]bool, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, nil
	}
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nftables: list inet tables: %w", err)
	}
	have := map[string]bool{}
	for _, t := range tables {
		if strings.HasPrefix(t.Name, guardTablePrefix) {
			have[t.Name] = true
		}
	}
	return have, nil
}

// PruneGuards removes the guard tables of networks not in nets (or that no
// longer need one): left by a crash, or by an older state file.
func PruneGuards(nets []model.Network) error {
	have, err := guardTables()
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for i := range nets {
		if guarded(&nets[i]) {
			keep[guardTable(nets[i].ID)] = true
		}
	}
	for t := range have {
		if !keep[t] {
			if err := deleteGuardTable(t); err != nil {
				return err
			}
		}
	}
	return nil
}
