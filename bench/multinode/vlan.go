package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/test/vlantag"
)

// Scenario 1's "VLAN to VXLAN" (docs/multinode.md, VLAN networks): two
// xlane nodes with --uplink ul0 on an underlay bridge; node 1's network
// "vl" is on VLAN vlanID of its uplink, node 2's "vl" (the same VNI) holds
// the server pod. The client is a host on the underlay bridge in node 1's
// subnet whose frames are tagged and untagged by test/vlantag (a tc
// program of its own: this kernel has no 802.1Q device nor tc vlan
// action). Its packets to node 2's pod arrive tagged on node 1's uplink,
// lose the tag there and are tunnelled to node 2; the replies come back
// over VXLAN and leave node 1 tagged.
//
//	vh (VID 100) ---- br0 ---- ul0 n1 (vl --vlan 100) ==VXLAN== n2 (vl) pod
//
// The Linux equivalent (a VLAN subinterface of the uplink in a bridge
// with the node's gateway address, routed into the kernel's VXLAN device)
// needs CONFIG_VLAN_8021Q; linuxVLAN says whether this kernel has it.
const vlanID = 100

// buildVLAN makes the xlane side of vlan-vxlan and says why there is no
// Linux side (linuxVLAN).
func buildVLAN(ctx context.Context, undo *harness.UndoStack, tmp, bins, id string) ([]*path1, string, error) {
	c, err := build(ctx, undo, tmp, bins, id, "xlane-tc-vlan")
	if err != nil {
		return nil, "", err
	}
	// n1's subnet is its pod CIDR (the only network takes it whole):
	// 10.245.1.0/24, gateway .1.
	vh := id + "-vh"
	if err := harness.AddNamespaces(ctx, undo, vh); err != nil {
		return nil, "", err
	}
	if err := harness.RunAll(ctx,
		[]string{"ip", "-n", c.ul, "link", "add", "vh", "type", "veth", "peer", "name", "eth0", "netns", vh},
		[]string{"ip", "-n", c.ul, "link", "set", "vh", "master", "br0", "up"},
		[]string{"ip", "-n", vh, "addr", "add", "10.245.1.200/24", "dev", "eth0"},
		[]string{"ip", "-n", vh, "link", "set", "eth0", "up"},
		[]string{"ip", "-n", vh, "route", "add", "10.245.0.0/16", "via", "10.245.1.1"},
	); err != nil {
		return nil, "", err
	}
	closeTagger, err := vlantag.Attach(filepath.Join(harness.NetnsDir, vh), "eth0", vlanID)
	if err != nil {
		return nil, "", err
	}
	undo.Push("remove the VLAN tagger of "+vh, func(context.Context) error { return closeTagger() })
	// The path must carry traffic before it is measured.
	if _, err := harness.Run(ctx, harness.NSExec(vh, "ping", "-c", "3", "-i", "0.2", "-W", "2", c.podIP[1])...); err != nil {
		return nil, "", fmt.Errorf("VLAN host to node 2's pod: %w", err)
	}
	ps := []*path1{{impl: "xlane-tc", path: "vlan-vxlan", client: vh, server: c.pods[1], dst: c.podIP[1], bind: c.podIP[1]}}
	return ps, "vlan-vxlan, linux: " + linuxVLAN(ctx, undo, id+"-probe"), nil
}

// linuxVLAN says why vlan-vxlan has no Linux row: a VLAN device cannot be
// made on this kernel (the error, and the kernel's config where readable),
// or, where it can, that this bench has no Linux setup for it.
func linuxVLAN(ctx context.Context, undo *harness.UndoStack, ns string) string {
	cfg := kernelConfig(readKernelConfig(), "CONFIG_VLAN_8021Q", "CONFIG_NET_ACT_VLAN", "CONFIG_BRIDGE_VLAN_FILTERING")
	if err := harness.AddNamespaces(ctx, undo, ns); err != nil {
		return "not measured (probe namespace: " + err.Error() + ")"
	}
	_, err := harness.Run(ctx, "ip", "-n", ns, "link", "add", "d0", "type", "dummy")
	if err == nil {
		_, err = harness.Run(ctx, "ip", "-n", ns, "link", "add", "link", "d0", "name", "d0.100", "type", "vlan", "id", "100")
	}
	if err == nil {
		return "not measured: this kernel makes VLAN devices, but the bench has no Linux VLAN-to-VXLAN setup yet (" + cfg + ")"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return "no equivalent on this kernel: it has no 802.1Q device (`ip link add ... type vlan`: " + strings.TrimSpace(msg) +
		"), no tc vlan action and no VLAN-filtering bridge (" + cfg + "), so nothing in Linux but a BPF program (what xlane is) " +
		"can take a tagged frame off the uplink or tag one; xlane's path measured alone"
}

// readKernelConfig is /proc/config.gz, uncompressed ("" if unreadable).
func readKernelConfig() string {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return ""
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(z, 4<<20))
	if err != nil {
		return ""
	}
	return string(b)
}

// kernelConfig says what a kernel config (text) sets each option to:
// "CONFIG_X=y, CONFIG_Y not set"; options it does not mention are "absent";
// an empty config is "kernel config not readable".
func kernelConfig(text string, options ...string) string {
	if strings.TrimSpace(text) == "" {
		return "kernel config not readable"
	}
	val := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			val[k] = k + "=" + v
		} else if strings.HasPrefix(l, "# ") && strings.HasSuffix(l, " is not set") {
			k := strings.TrimSuffix(strings.TrimPrefix(l, "# "), " is not set")
			val[k] = k + " not set"
		}
	}
	var out []string
	for _, o := range options {
		if v, ok := val[o]; ok {
			out = append(out, v)
		} else {
			out = append(out, o+" absent")
		}
	}
	return strings.Join(out, ", ")
}
