package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

// sharedServer answers every connection with its name and closes it
// first, so every connection leaves a TIME_WAIT socket on the backend (as
// a web server's short responses do).
func sharedServer(t *testing.T, netns, name string, addr netip.AddrPort) {
	t.Helper()
	ln := listenIn(t, netns, addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(name + "\n"))
			c.Close()
		}
	}()
}

// sharedLoad connects from netns to random VIPs of vips, total
// connections paced evenly over d by conc workers; each reads the
// backend's whole answer. Returns the failures by kind (with one example
// each).
func sharedLoad(t *testing.T, netns string, vips []netip.AddrPort, names map[string]bool, total, conc int, d time.Duration) (failed map[string]int, examples []string, took time.Duration) {
	t.Helper()
	var mu sync.Mutex
	failed = map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	per := total / conc
	gap := d / time.Duration(per)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			// One locked thread in the client's netns for the whole loop.
			err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
				rng := rand.New(rand.NewPCG(seed, 0x5e4))
				dl := net.Dialer{Timeout: 3 * time.Second}
				buf := make([]byte, 64)
				for i := 0; i < per; i++ {
					time.Sleep(time.Until(start.Add(time.Duration(i)*gap + time.Duration(seed)*gap/time.Duration(conc))))
					vip := vips[rng.IntN(len(vips))]
					err := func() error {
						c, err := dl.Dial("tcp", vip.String())
						if err != nil {
							return err
						}
						defer c.Close()
						c.SetDeadline(time.Now().Add(3 * time.Second))
						n, err := io.ReadFull(c, buf[:3])
						if err != nil {
							return err
						}
						if m, err := c.Read(buf[n:]); err != nil || !names[string(buf[:n+m])] {
							return fmt.Errorf("answer %q (%v), want a backend's name", buf[:n+m], err)
						}
						return nil
					}()
					if err != nil {
						kind := "other"
						var ne net.Error
						switch {
						case errors.As(err, &ne) && ne.Timeout():
							kind = "timeout"
						case strings.Contains(err.Error(), "unreachable"):
							kind = "unreachable"
						case strings.Contains(err.Error(), "refused"):
							kind = "refused"
						case strings.Contains(err.Error(), "reset"):
							kind = "reset"
						}
						mu.Lock()
						if failed[kind] == 0 {
							examples = append(examples, fmt.Sprintf("%s: %v", vip, err))
						}
						failed[kind]++
						mu.Unlock()
					}
				}
				return nil
			})
			if err != nil {
				t.Errorf("client worker: %v", err)
			}
		}(uint64(w))
	}
	wg.Wait()
	return failed, examples, time.Since(start)
}

// nstatIn returns netns's TCP counters (absolute, since the namespace was
// made).
func nstatIn(t *testing.T, netns string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, l := range strings.Split(runIn(t, netns, "nstat", "-asz"), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				out[f[0]] = v
			}
		}
	}
	return out
}

// TestServiceSharedBackends: 1,000 VIPs (and 1,000 IPv6 VIPs) balanced
// over the same three backends (one port), short connections that the
// backends close first, clients reusing their source ports across VIPs;
// 20,000 connections per family over 30 s, long enough for the tuples of
// the first closed flows to come free. Every connection must succeed and
// no backend may refuse a SYN as an old duplicate: the translated tuple
// (client address and port, backend) of a closed flow is the backend's
// TIME_WAIT socket for 60 s, and a new flow of another VIP on it carries
// the client's sequence numbers and timestamps for another destination,
// which the backend's TIME_WAIT refuses (PAWS: SYN lost, retransmitted a
// second later, or the connection times out). Before the fix, xlane freed
// such a tuple 10 s after the close (plus GC): TcpExtPAWSTimewait in the
// backends, SYN retransmissions, and, the clash range being the 4,536
// masquerade ports, pass_nat_ports (the SYN to Linux, which has no route
// to a VIP: ENETUNREACH).
//
//	client ── 10.98.{0..3}.x:80 (1,000 VIPs) ──┬─ b1 :8080
//	                                            ├─ b2 :8080
//	          [fd00:98::x]:80 (1,000 VIPs) ─────└─ b3 :8080
func TestServiceSharedBackends(t *testing.T) {
	const services, conc = 1000, 8
	conns, dur := 20000, 30*time.Second
	if v, err := strconv.Atoi(os.Getenv("XLANE_SHARED_CONNS")); err == nil {
		conns = v
	}
	if v, err := time.ParseDuration(os.Getenv("XLANE_SHARED_DURATION")); err == nil {
		dur = v
	}
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--ct-gc-interval", "1s") })
	n.mustXlane(nil, "network", "create", "shr", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64", "--masquerade=false")
	c := newNetns(t, "c")
	n.mustXlane(nil, "endpoint", "add", "shr", "--netns", c)
	names := map[string]bool{}
	var b4, b6, bns []string
	for i := 1; i <= 3; i++ {
		b := newNetns(t, "b")
		bns = append(bns, b)
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "shr", "--netns", b)
		name := fmt.Sprintf("backend-%d\n", i)
		names[name] = true
		sharedServer(t, b, strings.TrimSpace(name), netip.AddrPortFrom(ep.IPs[0], 8080))
		sharedServer(t, b, strings.TrimSpace(name), netip.AddrPortFrom(ep.IPs[1], 8080))
		b4 = append(b4, netip.AddrPortFrom(ep.IPs[0], 8080).String())
		b6 = append(b6, netip.AddrPortFrom(ep.IPs[1], 8080).String())
	}
	var vips4, vips6 []netip.AddrPort
	var reqs []api.ServiceCreate
	for i := 0; i < services; i++ {
		v4 := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 98, byte(i / 250), byte(i%250 + 1)}), 80)
		v6 := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("fd00:98::%x", i+1)), 80)
		vips4, vips6 = append(vips4, v4), append(vips6, v6)
		reqs = append(reqs,
			api.ServiceCreate{Name: fmt.Sprintf("s4-%d", i), VIP: v4.String() + "/tcp", Backends: b4},
			api.ServiceCreate{Name: fmt.Sprintf("s6-%d", i), VIP: v6.String() + "/tcp", Backends: b6})
	}
	begin := time.Now()
	if _, err := n.client().ApplyServices(context.Background(), api.ServiceApply{Services: reqs}); err != nil {
		t.Fatalf("apply %d services: %v", len(reqs), err)
	}
	t.Logf("programmed %d services in %v (one apply)", len(reqs), time.Since(begin).Round(time.Millisecond))

	var wg sync.WaitGroup
	for _, fam := range []struct {
		name string
		vips []netip.AddrPort
	}{{"IPv4", vips4}, {"IPv6", vips6}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failed, ex, took := sharedLoad(t, c, fam.vips, names, conns, conc, dur)
			total := 0
			for _, v := range failed {
				total += v
			}
			t.Logf("%s: %d connections over %d VIPs in %v, %d failed %v", fam.name, conns, services, took.Round(time.Millisecond), total, failed)
			if total > 0 {
				t.Errorf("%s: %d of %d connections failed %v, e.g. %s", fam.name, total, conns, failed, strings.Join(ex, "; "))
			}
		}()
	}
	wg.Wait()
	var paws int64
	for _, b := range bns {
		paws += nstatIn(t, b)["TcpExtPAWSTimewait"]
	}
	cs := nstatIn(t, c)
	t.Logf("backends: %d SYNs refused by TIME_WAIT (PAWS); client: %d SYN retransmissions", paws, cs["TcpExtTCPSynRetrans"])
	if paws > 0 {
		t.Errorf("the backends refused %d SYNs in TIME_WAIT (TcpExtPAWSTimewait): flows of other VIPs reused a closed flow's translated tuple", paws)
	}
	if t.Failed() {
		st, _, _ := n.xlane("status")
		t.Logf("xlane status:\n%s", st)
	}
}
