package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/trace"
)

// monProc is a running `xlane monitor -o json`.
type monProc struct {
	cmd    *exec.Cmd
	events chan api.MonitorEvent
}

// startMonitor runs `xlane monitor -o json args...` and returns once the
// daemon has subscribed it (its first line, the stats line, arrived).
func (n *node) startMonitor(t *testing.T, args ...string) *monProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "xlane"), append([]string{"--socket", n.socket, "monitor", "-o", "json"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start xlane monitor: %v", err)
	}
	m := &monProc{cmd: cmd, events: make(chan api.MonitorEvent, 1<<16)}
	t.Cleanup(func() { m.stop() })
	go func() {
		defer close(m.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev api.MonitorEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("monitor line %q: %v", sc.Text(), err)
				return
			}
			m.events <- ev
		}
	}()
	select {
	case ev, ok := <-m.events:
		if !ok || ev.Type != "stats" {
			t.Fatalf("xlane monitor: first line %+v (open %v), want stats; stderr %s", ev, ok, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("xlane monitor: no first line; stderr %s", stderr.String())
	}
	return m
}

// next returns the first event within timeout that ok accepts.
func (m *monProc) next(t *testing.T, timeout time.Duration, ok func(api.MonitorEvent) bool) api.MonitorEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, open := <-m.events:
			if !open {
				t.Fatalf("xlane monitor ended before the event")
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no matching monitor event within %v", timeout)
		}
	}
}

// stop ends the monitor this test started, by pid.
func (m *monProc) stop() {
	if m.cmd.Process != nil {
		m.cmd.Process.Signal(syscall.SIGTERM)
		m.cmd.Wait()
	}
}

// monTypes reads the event types the node's datapath emits, from the
// monitor's config map of the program on host device dev.
func monTypes(t *testing.T, n *node, dev string) uint32 {
	t.Helper()
	m := progMap(t, n, dev, "xlane_mon_config")
	defer m.Close()
	var v [4]uint32 // struct mon_config
	if err := m.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	return v[0]
}

// progMap opens the map called name (the kernel keeps its first 15
// characters) of the program on host device dev's ingress: the monitor's
// maps are unpinned, found through the pinned tcx link.
func progMap(t *testing.T, n *node, dev, name string) *ebpf.Map {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(n.pinDir, "links", dev+"_ingress"), nil)
	if err != nil {
		t.Fatalf("load link of %s: %v", dev, err)
	}
	defer l.Close()
	li, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := pi.MapIDs()
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err == nil && strings.HasPrefix(name, mi.Name) && len(mi.Name) >= 12 {
			return m
		}
		m.Close()
	}
	t.Fatalf("no %s among the maps of %s's program", name, dev)
	return nil
}

func waitMonTypes(t *testing.T, n *node, dev string, want func(uint32) bool) uint32 {
	t.Helper()
	var v uint32
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if v = monTypes(t, n, dev); want(v) {
			return v
		}
	}
	return v
}

// udpFlood sends count datagrams from netns to addr as fast as it can.
func udpFlood(t *testing.T, netns string, addr netip.AddrPort, count int) {
	t.Helper()
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		c, err := net.Dial("udp", addr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		for i := 0; i < count; i++ {
			c.Write([]byte("xlane flood"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("flood %s from %s: %v", addr, netns, err)
	}
}

//	c0 (server), c1 (client), c2 --- node [xlaned --uplink up0 --monitor-rate 100 --ct-gc-interval 1s]
//	                                   up0 192.0.2.2 ==== 192.0.2.1 outside
//
// `xlane monitor` and `xlane trace` against real traffic (tc mode): the
// monitor shows a firewall drop with its rule, switches the datapath's
// events off when its last client leaves, and counts what its rate limit
// suppresses under a flood; the trace of a table of packets agrees with
// what the same packets really do, and changes nothing of the live
// datapath. UDP and ICMP flows, which end by timing out, get their
// flow_close from the conntrack GC.
func TestMonitorAndTrace(t *testing.T) {
	var out string
	n := newNode(t, withOutsideRoutes(&out, "1500", false), func(n *node) {
		n.flags = append(n.flags, "--monitor-rate", "100", "--ct-gc-interval", "1s")
	})
	n.mustXlane(nil, "network", "create", "mon", "--subnet", "10.83.0.0/24", "--subnet", "fd00:83::/64", "--mode", "tc")
	var cs []string
	var eps []api.EndpointInfo
	for i := 0; i < 3; i++ {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "mon", "--netns", c)
		cs, eps = append(cs, c), append(eps, ep)
	}
	c0v4, c0v6, c1v4 := eps[0].IPs[0], eps[0].IPs[1], eps[1].IPs[0]
	for _, a := range []netip.Addr{c0v4, c0v6} {
		listen(t, cs[0], a, 80)
	}
	listen(t, cs[0], c0v4, 8081) // only the rule keeps it from answering
	listen(t, cs[0], c0v6, 8081)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(`rules:
  - {name: closed, scope: network:mon, direction: to-endpoint, proto: tcp, dport: 8081, action: drop}
  - {name: flood, scope: network:mon, direction: to-endpoint, proto: udp, dport: 9, action: drop}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	n.mustXlane(nil, "fw", "apply", rules)
	n.mustXlane(nil, "endpoint", "publish", eps[0].ID, "--port", "8080:80/tcp")
	n.mustXlane(nil, "service", "create", "web", "--vip", "10.96.83.1:80/tcp", "--backend", netip.AddrPortFrom(c0v4, 80).String())

	t.Run("firewall drop with its rule", func(t *testing.T) {
		if v := monTypes(t, n, eps[0].HostIf); v != 0 {
			t.Fatalf("no monitor yet, datapath types %#x, want 0", v)
		}
		m := n.startMonitor(t, "-t", "drop", "--reason", "drop_fw", "--endpoint", eps[0].ID)
		m2 := n.startMonitor(t, "-t", "fw")
		if v := monTypes(t, n, eps[0].HostIf); v != 1|4 { // MON_DROP | MON_FW: the clients' union
			t.Errorf("two monitors (drop, fw): datapath types %#x, want 0x5", v)
		}
		if err := dial(cs[1], c0v4, 8081, 500*time.Millisecond); err == nil {
			t.Fatalf("port 8081 (dropped by rule closed) answered")
		}
		ev := m.next(t, 5*time.Second, func(ev api.MonitorEvent) bool { return ev.Type == "drop" })
		// In tc mode the sender's program runs the destination's
		// to-endpoint rules before its peer redirect: the drop is there.
		if ev.Reason != "drop_fw" || ev.Rule != "closed" || ev.Verdict != "drop" || ev.Hook != "from_endpoint" ||
			ev.Proto != "tcp" || ev.Src != c1v4.String() || ev.Dst != c0v4.String() || ev.DstPort != 8081 ||
			ev.Endpoint != eps[1].ID || ev.Network != "mon" || ev.Device != eps[1].HostIf {
			t.Errorf("drop event %+v: want drop_fw by rule closed, %s -> %s:8081 in %s's program", ev, c1v4, c0v4, eps[1].HostIf)
		}
		t.Logf("monitor event: %+v", ev)
		fw := m2.next(t, 5*time.Second, func(ev api.MonitorEvent) bool { return ev.Type == "fw" })
		if fw.Rule != "closed" || fw.Action != "drop" || fw.DstPort != 8081 {
			t.Errorf("fw event %+v: want rule closed, drop, port 8081", fw)
		}
		m2.stop()
		if v := waitMonTypes(t, n, eps[0].HostIf, func(v uint32) bool { return v == 1 }); v != 1 {
			t.Errorf("fw monitor gone: datapath types %#x, want 0x1 (drop)", v)
		}
		m.stop()
		if v := waitMonTypes(t, n, eps[0].HostIf, func(v uint32) bool { return v == 0 }); v != 0 {
			t.Errorf("last monitor gone: datapath types %#x, want 0", v)
		}
	})

	t.Run("suppressed under a flood", func(t *testing.T) {
		const flood = 5000
		m := n.startMonitor(t, "-t", "drop", "--port", "9")
		udpFlood(t, cs[1], netip.AddrPortFrom(c0v4, 9), flood)
		// 100 events per second per CPU (burst 10): most of the flood is
		// counted, not shown.
		// (Not every datagram need reach the program: a backlog may
		// drop some first.)
		st := m.next(t, 10*time.Second, func(ev api.MonitorEvent) bool {
			return ev.Type == "stats" && ev.Counters.Suppressed >= flood/2
		})
		if st.Counters.Events == 0 || st.Counters.Events > flood/10 {
			t.Errorf("stats %+v after %d drops at 100/s: want most suppressed and some shown", *st.Counters, flood)
		}
	})

	t.Run("flow_close of expired udp and icmp flows", func(t *testing.T) {
		m := n.startMonitor(t, "-t", "flow_close", "--endpoint", eps[1].ID)
		defer m.stop()
		srv, c := udpPair(t, cs[1], cs[0], netip.AddrPortFrom(c0v4, 5300))
		defer srv.Close()
		defer c.Close()
		if _, err := c.Write([]byte("xlane expiry")); err != nil {
			t.Fatal(err)
		}
		srv.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, _, err := srv.ReadFrom(make([]byte, 64)); err != nil {
			t.Fatalf("udp to %s:5300: %v", c0v4, err)
		}
		udpSrc := netip.MustParseAddrPort(c.LocalAddr().String())
		ping(t, cs[1], c0v4)
		// Age the two flows past their timeouts (30 s) and the GC's grace
		// (10 s) instead of waiting: their entries' deadlines go to 1 ns
		// after boot, and the next pass (every second) collects them.
		ct, err := ebpf.LoadPinnedMap(filepath.Join(n.pinDir, "maps", "xlane_ct"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ct.Close()
		var (
			k    bpf.CTKey
			v    bpf.CTVal
			aged int
		)
		for it := ct.Iterate(); it.Next(&k, &v); {
			a := netip.AddrFrom16(k.Saddr).Unmap()
			b := netip.AddrFrom16(k.Daddr).Unmap()
			udp := k.Proto == syscall.IPPROTO_UDP && (k.Sport == htons(5300) || k.Dport == htons(5300))
			if (a == c1v4 || b == c1v4) && (udp || k.Proto == syscall.IPPROTO_ICMP) {
				v.Expires = 1
				if err := ct.Update(&k, &v, ebpf.UpdateExist); err != nil {
					t.Fatal(err)
				}
				aged++
			}
		}
		if aged != 4 { // two flows, two entries each
			t.Fatalf("aged %d conntrack entries of %s, want 4 (a udp and an icmp flow)", aged, c1v4)
		}
		seen := map[string]api.MonitorEvent{}
		for len(seen) < 2 {
			ev := m.next(t, 10*time.Second, func(ev api.MonitorEvent) bool {
				// (The flood's flow above may time out meanwhile.)
				return ev.Type == "flow_close" && (ev.Proto == "icmp" || ev.DstPort == 5300)
			})
			if ev.Action != "expired" || ev.Src != c1v4.String() || ev.Dst != c0v4.String() || ev.Endpoint != eps[1].ID {
				t.Fatalf("flow_close %+v: want an expired flow %s -> %s of %s", ev, c1v4, c0v4, eps[1].ID)
			}
			seen[ev.Proto] = ev
		}
		if u := seen["udp"]; u.SrcPort != udpSrc.Port() || u.DstPort != 5300 {
			t.Errorf("udp flow_close %+v: want %s -> %s:5300", u, udpSrc, c0v4)
		}
		if _, ok := seen["icmp"]; !ok {
			t.Errorf("flow_close events %+v: want udp and icmp", seen)
		}
	})

	t.Run("trace agrees with traffic", func(t *testing.T) {
		// The drop by rule again, from a capture of the packet (built
		// as the container would send it).
		smac, _ := net.ParseMAC(eps[1].MAC)
		dmac, _ := net.ParseMAC(eps[1].HostMAC)
		syn, err := trace.Build(trace.Spec{SrcMAC: smac, DstMAC: dmac, Src: eps[1].IPs[1], Dst: c0v6, SrcPort: 40001, DstPort: 8081})
		if err != nil {
			t.Fatal(err)
		}
		pcap := filepath.Join(t.TempDir(), "syn.pcap")
		var buf bytes.Buffer
		w := pcapgo.NewWriter(&buf)
		w.WriteFileHeader(65535, layers.LinkTypeEthernet)
		w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(syn), Length: len(syn)}, syn)
		if err := os.WriteFile(pcap, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name    string
			args    []string
			verdict string // the trace's final verdict
			reason  string
			stage   string // a stage result the trace must show
			real    func() error
		}{
			{"allowed ipv4", []string{"--from", eps[1].ID, "--to", netip.AddrPortFrom(c0v4, 80).String()}, "forward", "fwd_peer", "",
				func() error { return dial(cs[1], c0v4, 80, 2*time.Second) }},
			{"allowed ipv6", []string{"--from", eps[1].ID, "--to", netip.AddrPortFrom(c0v6, 80).String()}, "forward", "fwd_peer", "",
				func() error { return dial(cs[1], c0v6, 80, 2*time.Second) }},
			{"dropped by rule", []string{"--from", eps[1].ID, "--to", netip.AddrPortFrom(c0v4, 8081).String()}, "drop", "drop_fw", "rule closed: drop",
				func() error { return dial(cs[1], c0v4, 8081, 500*time.Millisecond) }},
			{"dropped by rule, ipv6 from a pcap", []string{"--pcap", pcap}, "drop", "drop_fw", "rule closed: drop",
				func() error { return dial(cs[1], c0v6, 8081, 500*time.Millisecond) }},
			{"spoofed source", []string{"--from", eps[1].ID, "--from-ip", "10.83.0.99", "--to", netip.AddrPortFrom(c0v4, 80).String()}, "drop", "drop_spoofed", "",
				func() error {
					return dialSpoofed(cs[1], netip.MustParseAddr("10.83.0.99"), netip.AddrPortFrom(c0v4, 80))
				}},
			{"published port from outside", []string{"--from-ip", "192.0.2.1", "--to", "192.0.2.2:8080"}, "pass", "deliver", "destination to " + netip.AddrPortFrom(c0v4, 80).String(),
				func() error { return dialOnce(out, netip.MustParseAddrPort("192.0.2.2:8080")) }},
			{"service", []string{"--from", eps[2].ID, "--to", "10.96.83.1:80"}, "forward", "fwd_peer", "service web: backend #0 " + netip.AddrPortFrom(c0v4, 80).String(),
				func() error { return dial(cs[2], netip.MustParseAddr("10.96.83.1"), 80, 2*time.Second) }},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var res api.TraceResult
				n.mustXlane(&res, append([]string{"trace"}, c.args...)...)
				var text string
				for _, h := range res.Hops {
					for _, s := range h.Stages {
						text += h.Hook + " " + s.Stage + ": " + s.Result + "\n"
					}
				}
				human, _, _ := n.xlane(append([]string{"trace"}, c.args...)...)
				t.Logf("xlane trace %s\n%s", strings.Join(c.args, " "), human)
				if res.Verdict != c.verdict || res.Reason != c.reason {
					t.Errorf("trace: %s (%s), want %s (%s)\n%s", res.Verdict, res.Reason, c.verdict, c.reason, text)
				}
				if c.stage != "" && !strings.Contains(text, c.stage) {
					t.Errorf("trace does not show %q:\n%s", c.stage, text)
				}
				err := c.real()
				if (err == nil) != (c.verdict != "drop") {
					t.Errorf("real traffic: %v, but the trace says %s (%s)\n%s", err, res.Verdict, res.Reason, text)
				}
			})
		}
		// The traces opened no flow of their own (source port 40000) in
		// the live table.
		var after []api.Flow
		n.mustXlane(&after, "ct", "ls", "--limit", "0")
		for _, f := range after {
			if strings.HasSuffix(f.Src, ":40000") {
				t.Errorf("a trace's flow is in the live conntrack table: %+v", f)
			}
		}
	})
}

// dialSpoofed connects from netns to dst from address src, which it adds to
// the netns' eth0 first: a container spoofing another address.
func dialSpoofed(netns string, src netip.Addr, dst netip.AddrPort) error {
	if out, err := inNS(netns, "ip", "addr", "add", src.String()+"/32", "dev", "eth0").CombinedOutput(); err != nil {
		return &net.OpError{Op: "addr add", Err: errString(string(out))}
	}
	return ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		d := net.Dialer{Timeout: 500 * time.Millisecond, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
		c, err := d.Dial("tcp", dst.String())
		if err == nil {
			c.Close()
		}
		return err
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// TestMonitorOff: xlaned --monitor=false loads its programs with the
// monitor's hooks built out: status says so, `xlane monitor` is refused
// with a reason, the live program emits nothing even with every event
// type switched on in its config map by hand, traffic flows, and `xlane
// trace` still shows the stages (its programs have the hooks).
func TestMonitorOff(t *testing.T) {
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--monitor=false") })
	n.mustXlane(nil, "network", "create", "moff", "--subnet", "10.84.0.0/24", "--mode", "tc")
	var cs []string
	var eps []api.EndpointInfo
	for range 2 {
		c := newNetns(t, "c")
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "add", "moff", "--netns", c)
		cs, eps = append(cs, c), append(eps, ep)
	}
	dst := eps[0].IPs[0]
	listen(t, cs[0], dst, 80)

	var st api.Status
	n.mustXlane(&st, "status")
	if st.Monitor {
		t.Errorf("status: monitor %v with --monitor=false, want false", st.Monitor)
	}
	if human, _, err := n.xlane("status"); err != nil || !strings.Contains(human, "monitor:") || !strings.Contains(human, "--monitor=false") {
		t.Errorf("xlane status (%v) does not say the monitor is off:\n%s", err, human)
	}
	// Accepted, the client would run until stopped: 10 s is plenty for
	// a refusal.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mon := exec.CommandContext(ctx, filepath.Join(binDir, "xlane"), "--socket", n.socket, "monitor", "-o", "json")
	var stderr strings.Builder
	mon.Stderr = &stderr
	err := mon.Run()
	if err == nil || ctx.Err() != nil || !strings.Contains(stderr.String(), "--monitor=false") {
		t.Errorf("xlane monitor against --monitor=false: err %v (timeout: %v), stderr %q; want a refusal naming --monitor=false", err, ctx.Err(), stderr.String())
	}

	// Every type on, no rate limit, as a client would set it: the
	// program has no hooks to read it.
	cfg := progMap(t, n, eps[1].HostIf, "xlane_mon_config")
	defer cfg.Close()
	if err := cfg.Put(uint32(0), [4]uint32{uint32(bpf.MonAll), 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err = dial(cs[1], dst, 80, 2*time.Second); err != nil {
		t.Fatalf("TCP to %s:80 with the monitor built out: %v", dst, err)
	}
	state := progMap(t, n, eps[1].HostIf, "xlane_mon_state")
	defer state.Close()
	var per []bpf.MonState
	if err := state.Lookup(uint32(0), &per); err != nil {
		t.Fatal(err)
	}
	for cpu, s := range per {
		if s.Emitted != 0 || s.Suppressed != 0 || s.Lost != 0 {
			t.Errorf("CPU %d: monitor state %+v after a connection with every type on, want nothing emitted", cpu, s)
		}
	}
	if err := cfg.Put(uint32(0), [4]uint32{}); err != nil {
		t.Fatal(err)
	}

	var res api.TraceResult
	n.mustXlane(&res, "trace", "--from", eps[1].ID, "--to", netip.AddrPortFrom(dst, 80).String())
	if res.Verdict != "forward" || res.Reason != "fwd_peer" || len(res.Hops) == 0 || len(res.Hops[0].Stages) < 2 {
		t.Errorf("trace with --monitor=false: %s (%s), hops %+v; want forward (fwd_peer) with its stages", res.Verdict, res.Reason, res.Hops)
	}
}
