package e2e

// bench/peers' narrower switches for chasing a row where xlane loses:
// XLANE_PEERS_ROWS runs only the rows it matches, XLANE_PEERS_PERF records
// a system-wide perf profile of each row measured (docs/cilium.md, "Where
// the time goes"; bench/perfbuckets buckets it).

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// peersRowWanted says whether row is measured: XLANE_PEERS_ROWS is a
// regular expression over the rows' names (default: every row), e.g.
// 'same node, TCP|1,000-rule'.
func peersRowWanted(t *testing.T, row string) bool {
	expr := os.Getenv("XLANE_PEERS_ROWS")
	if expr == "" {
		return true
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatalf("XLANE_PEERS_ROWS=%q: %v", expr, err)
	}
	return re.MatchString(row)
}

var peersSlug = regexp.MustCompile(`[^a-zA-Z0-9]+`)

// peersPerf starts a system-wide profile (perf record -a -g, cpu-clock at
// 999 Hz: the machine is a VM without a PMU) of row, repetition r, on
// setup, into XLANE_PEERS_PERF/<setup>-<row>-r<r>.data, and returns what
// stops it (a no-op without XLANE_PEERS_PERF). Bucket a profile with
//
//	perf script -i F -F comm,pid,ip,sym | go run ./bench/perfbuckets
func peersPerf(t *testing.T, setup, row string, r int) func() {
	dir := os.Getenv("XLANE_PEERS_PERF")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("XLANE_PEERS_PERF: %v", err)
	}
	data := filepath.Join(dir, fmt.Sprintf("%s-%s-r%d.data", setup, strings.Trim(peersSlug.ReplaceAllString(row, "-"), "-"), r))
	rec := exec.Command("perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", "999", "-q", "-o", data)
	var stderr strings.Builder
	rec.Stdout, rec.Stderr = io.Discard, &stderr
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := rec.Start(); err != nil {
		t.Fatalf("perf record: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // perf's set-up, outside the row
	return func() {
		rec.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- rec.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			rec.Process.Kill()
			<-done
			t.Logf("perf record %s ignored SIGINT for 30 s: killed (%s)", data, strings.TrimSpace(stderr.String()))
		}
	}
}

// peersUplinkGSO is the nodes' uplinks' GSO/GRO limit by default: a NIC
// an operator set up for BIG TCP (a BIG-TCP-capable NIC's tso_max_size is
// well above 64 KiB, its gso_max_size 64 KiB until raised), the same for
// every setup. Cilium raises ul0 to this itself (--enable-ipv4-big-tcp:
// min(tso_max_size, 192 KiB)); xlane reads it (cluster.BigTCPOff) and its
// calibration decides. XLANE_PEERS_UPLINK_GSO=0: the veth's 64 KiB (the
// second run's set-up, docs/cilium.md).
const peersUplinkGSO = "196608"

// peersVariant reads a setup name's variant: what follows the first
// "+" of e.g. xlane-vxlan+--uplink-xdp-mode=none+gso=196608, a list of
// "+"-separated xlaned flags (--name=value, xlane only) and gso=BYTES
// (the nodes' uplinks set up for BIG TCP, peersUplinkBigTCP; default
// XLANE_PEERS_UPLINK_GSO, else peersUplinkGSO; 0: the veth's) and bigtcp=on|off (xlane: the pods'
// network created before the first pod with --big-tcp on or off instead
// of the CNI's auto). A variant is a column of its own,
// measured in the same rotation as the others: a change against the
// setup it varies, in one run.
func peersVariant(t *testing.T, name string) (base string, flags []string, gso int, bigTCP string) {
	base, variant, _ := strings.Cut(name, "+")
	gsoArg := os.Getenv("XLANE_PEERS_UPLINK_GSO")
	if gsoArg == "" {
		gsoArg = peersUplinkGSO
	}
	for _, v := range strings.Split(variant, "+") {
		switch {
		case v == "":
		case strings.HasPrefix(v, "--"):
			if !strings.HasPrefix(base, "xlane-") {
				t.Fatalf("XLANE_PEERS_SETUPS: %q: flags vary xlane setups only", name)
			}
			flags = append(flags, v)
		case strings.HasPrefix(v, "gso="):
			gsoArg = strings.TrimPrefix(v, "gso=")
		case v == "bigtcp=on" || v == "bigtcp=off":
			if !strings.HasPrefix(base, "xlane-") {
				t.Fatalf("XLANE_PEERS_SETUPS: %q: bigtcp= varies xlane setups only", name)
			}
			bigTCP = strings.TrimPrefix(v, "bigtcp=")
		default:
			t.Fatalf("XLANE_PEERS_SETUPS: %q: variant %q: want --xlaned-flag=value, gso=BYTES or bigtcp=on|off", name, v)
		}
	}
	if gsoArg != "0" {
		var err error
		if gso, err = strconv.Atoi(gsoArg); err != nil || gso < 65536 {
			t.Fatalf("%s: uplink GSO %q: want bytes ≥ 65536, or 0 (the veth's 64 KiB)", name, gsoArg)
		}
	}
	return base, flags, gso, bigTCP
}

// peersUplinkBigTCP gives device dev in namespace ns the GSO and GRO
// limits (IPv4 and IPv6) of a NIC an operator set up for BIG TCP: size
// bytes (0: the veth's defaults, 64 KiB, unchanged). 196608 is what
// Cilium sets on its devices with --enable-ipv4-big-tcp (min(tso_max_size,
// 192 KiB)); on a veth, as on a NIC with hardware TSO/LRO, the aggregates
// cross the "wire" whole.
func peersUplinkBigTCP(t *testing.T, ns, dev string, size int) {
	t.Helper()
	if size == 0 {
		return
	}
	l, h := linkIn(t, ns, dev)
	for _, set := range []func(netlink.Link, int) error{h.LinkSetGSOMaxSize, h.LinkSetGROMaxSize, h.LinkSetGSOIPv4MaxSize, h.LinkSetGROIPv4MaxSize} {
		if err := set(l, size); err != nil {
			t.Fatalf("uplink GSO %d: %s in %s: %v", size, dev, ns, err)
		}
	}
}

// linkIn returns device ifname of namespace ns (a name of ip netns) and a
// netlink handle in ns, closed when the test ends.
func linkIn(t *testing.T, ns, ifname string) (netlink.Link, *netlink.Handle) {
	t.Helper()
	nsh, err := netns.GetFromPath(nsPath(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l, err := h.LinkByName(ifname)
	if err != nil {
		t.Fatalf("%s in %s: %v", ifname, ns, err)
	}
	return l, h
}
