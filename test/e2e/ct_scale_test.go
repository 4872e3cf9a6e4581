package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/datapath"
)

// Conntrack at a million entries: the table is filled directly through its
// pinned map with synthetic flows (keys no real packet carries), so the
// tests measure and exercise a full-size table in seconds.

const ctMillion = 1_000_000

// synthCTKey is the i-th synthetic flow: TCP 100.64.x.y:port -> 100.127.0.1:1,
// addresses from 100.64.0.0/10 (shared address space) no test uses.
func synthCTKey(i int) bpf.CTKey {
	k := bpf.CTKey{Proto: unix.IPPROTO_TCP}
	src := netip.AddrFrom4([4]byte{100, 64 + byte(i>>24&0x3f), byte(i >> 16), byte(i >> 8)})
	k.Saddr = src.As16()
	k.Daddr = netip.MustParseAddr("100.127.0.1").As16()
	k.Sport = ctHtons(uint16(1024 + i&0xff))
	k.Dport = ctHtons(1)
	return k
}

// ctHtons turns a port into the network-order value a ct_key field holds.
func ctHtons(p uint16) uint16 {
	return binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, p))
}

// ctMonoNow is bpf_ktime_get_ns()'s clock.
func ctMonoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// ctExpiredAt is the deadline of a synthetic expired entry: boot, which
// every clock has passed by more than the GC's grace. Not "now - an hour":
// the monotonic clock counts from boot, so on a machine up for less than
// an hour that wraps to a deadline centuries ahead (issue 11).
const ctExpiredAt = 1

// ctFill inserts synthetic entries [from, to) into m; expired(i) picks the
// ones whose deadline is ctExpiredAt, the others expire in a day.
// Returns the first error (E2BIG once the table is full).
func ctFill(m *ebpf.Map, from, to int, expired func(i int) bool) (int, error) {
	const chunk = 1 << 16
	now := ctMonoNow()
	keys := make([]bpf.CTKey, 0, chunk)
	vals := make([]bpf.CTVal, 0, chunk)
	done := 0
	for i := from; i < to; {
		keys, vals = keys[:0], vals[:0]
		for ; i < to && len(keys) < chunk; i++ {
			v := bpf.CTVal{Expires: now + uint64(24*time.Hour), State: uint8(bpf.CTEstablished), Packets: 1, Bytes: 64}
			if expired != nil && expired(i) {
				v.Expires = ctExpiredAt
			}
			keys = append(keys, synthCTKey(i))
			vals = append(vals, v)
		}
		n, err := m.BatchUpdate(keys, vals, nil)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// ctCPUTime is this process' user + system CPU time.
func ctCPUTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ctMeasure runs fn and returns its CPU and wall time.
func ctMeasure(fn func()) (cpu, wall time.Duration) {
	runtime.GC()
	c0, w0 := ctCPUTime(), time.Now()
	fn()
	return ctCPUTime() - c0, time.Since(w0)
}

// TestCTGCAtScale runs the daemon's conntrack GC, stats and flush on a
// table of a million entries (90 % live, 10 % expired) and reports what
// one pass costs.
func TestCTGCAtScale(t *testing.T) {
	pinDir := "/sys/fs/bpf/xle-gc-" + suffix()
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	dp, err := datapath.Open(pinDir, bpf.Options{CTSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, "maps", "xlane_ct"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	expired := func(i int) bool { return i%10 == 0 }
	cpu, wall := ctMeasure(func() {
		if n, err := ctFill(m, 0, ctMillion, expired); err != nil || n != ctMillion {
			t.Fatalf("fill: %d entries, %v", n, err)
		}
	})
	t.Logf("fill of 1M entries: cpu %v wall %v", cpu, wall)

	var st datapath.CTStats
	cpu, wall = ctMeasure(func() { st, err = dp.CTStats() })
	if err != nil || st.Entries != ctMillion || st.Expired != ctMillion/10 {
		t.Fatalf("stats %+v, %v: want %d entries, %d expired", st, err, ctMillion, ctMillion/10)
	}
	t.Logf("stats at 1M entries: cpu %v wall %v", cpu, wall)

	var n int
	cpu, wall = ctMeasure(func() { n, err = dp.GCCT(uint64(10*time.Second), nil) })
	if err != nil || n != ctMillion/10 {
		t.Fatalf("gc: deleted %d, %v; want %d", n, err, ctMillion/10)
	}
	t.Logf("gc pass at 1M entries (100k expired): cpu %v wall %v", cpu, wall)
	// Nothing live was collected, nothing expired is left.
	if st, err = dp.CTStats(); err != nil || st.Entries != ctMillion-ctMillion/10 || st.Expired != 0 {
		t.Fatalf("after gc: %+v, %v", st, err)
	}
	for _, i := range []int{1, 2, 999_999} {
		var v bpf.CTVal
		k := synthCTKey(i)
		if err := m.Lookup(&k, &v); err != nil {
			t.Errorf("live entry %d gone after gc: %v", i, err)
		}
	}

	cpu, wall = ctMeasure(func() { n, err = dp.GCCT(uint64(10*time.Second), nil) })
	if err != nil || n != 0 {
		t.Fatalf("second gc: deleted %d, %v; want 0", n, err)
	}
	t.Logf("gc pass at 900k live entries, nothing to delete: cpu %v wall %v", cpu, wall)

	cpu, wall = ctMeasure(func() { n, err = dp.FlushCT() })
	if err != nil || n != ctMillion-ctMillion/10 {
		t.Fatalf("flush: %d, %v", n, err)
	}
	t.Logf("flush of 900k entries: cpu %v wall %v", cpu, wall)
	var k bpf.CTKey
	if err := m.NextKey(nil, &k); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("table not empty after flush: %v", err)
	}
}

// ctTCPPair connects a client in netns from to a listener on dst (port
// chosen by the kernel) in netns to, and checks 64 KiB go each way.
// Returns the client's and the server's addresses of the connection.
func ctTCPPair(t *testing.T, from, to string, dst netip.Addr) (client, server netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	err := ns.WithNetNSPath(nsPath(to), func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(dst, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", to, err)
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64<<10)
		if _, err := io.ReadFull(c, buf); err != nil {
			echoed <- err
			return
		}
		_, err = c.Write(buf)
		echoed <- err
	}()
	var c net.Conn
	err = ns.WithNetNSPath(nsPath(from), func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("connect %s from %s: %v", ln.Addr(), from, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, 64<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if _, err := c.Write(msg); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo from %s: %v (equal %v)", ln.Addr(), err, bytes.Equal(got, msg))
	}
	if err := <-echoed; err != nil {
		t.Fatalf("server: %v", err)
	}
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

func ctKeyFor(client, server netip.AddrPort) bpf.CTKey {
	return bpf.CTKey{Saddr: client.Addr().Unmap().As16(), Daddr: server.Addr().Unmap().As16(),
		Sport: ctHtons(client.Port()), Dport: ctHtons(server.Port()), Proto: unix.IPPROTO_TCP}
}

// TestCTScale: a node whose conntrack table holds a million flows. Stats
// still answer; below the limit new connections are tracked; at the limit
// they still work (forwarded untracked: the network does not need NAT)
// and are counted as table_full_packets.
func TestCTScale(t *testing.T) {
	const size = 1 << 20 // just above a million (and the default)
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--ct-size", fmt.Sprint(size)) })
	n.mustXlane(nil, "network", "create", "ct", "--subnet", "10.84.0.0/24", "--subnet", "fd00:84::/64", "--masquerade=false")
	c1, c2 := newNetns(t, "c"), newNetns(t, "c")
	var e1, e2 api.EndpointInfo
	n.mustXlane(&e1, "endpoint", "add", "ct", "--netns", c1)
	n.mustXlane(&e2, "endpoint", "add", "ct", "--netns", c2)

	m, err := ebpf.LoadPinnedMap(filepath.Join(n.pinDir, "maps", "xlane_ct"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.MaxEntries() != size {
		t.Fatalf("xlane_ct has %d entries, want --ct-size %d", m.MaxEntries(), size)
	}
	begin := time.Now()
	if got, err := ctFill(m, 0, ctMillion, nil); err != nil || got != ctMillion {
		t.Fatalf("fill: %d, %v", got, err)
	}
	t.Logf("filled 1M entries in %v", time.Since(begin))

	var st api.CTStats
	begin = time.Now()
	n.mustXlane(&st, "ct", "stats")
	t.Logf("ct stats at 1M entries in %v: %+v", time.Since(begin), st)
	if st.Entries < ctMillion || st.MaxEntries != size || st.BytesPerEntry <= 0 {
		t.Fatalf("ct stats %+v: want >= %d entries of %d and a bytes-per-entry figure", st, ctMillion, size)
	}

	t.Run("below the limit new connections are tracked", func(t *testing.T) {
		for _, i := range []int{0, 1} { // IPv4, IPv6
			client, server := ctTCPPair(t, c1, c2, e2.IPs[i])
			for _, k := range []bpf.CTKey{ctKeyFor(client, server), ctKeyFor(server, client)} {
				var v bpf.CTVal
				if err := m.Lookup(&k, &v); err != nil {
					t.Errorf("connection %v -> %v: no entry %x: %v", client, server, k, err)
				} else if v.State == 0 {
					t.Errorf("connection %v -> %v still new after the exchange", client, server)
				}
			}
		}
		n.mustXlane(&st, "ct", "stats")
		if st.TableFull != 0 {
			t.Errorf("table_full_packets = %d before the table is full", st.TableFull)
		}
	})

	t.Run("at the limit new connections still work", func(t *testing.T) {
		got, err := ctFill(m, ctMillion, ctMillion+size, nil)
		if !errors.Is(err, unix.E2BIG) {
			t.Fatalf("filling up: %d more entries, then %v; want E2BIG", got, err)
		}
		var k bpf.CTKey
		var v bpf.CTVal
		if k = synthCTKey(ctMillion + size - 1); m.Update(&k, &v, ebpf.UpdateNoExist) == nil {
			t.Fatalf("table not full after adding %d entries", got)
		}
		client, server := ctTCPPair(t, c1, c2, e2.IPs[0])
		k = ctKeyFor(client, server)
		if err := m.Lookup(&k, &v); err == nil {
			t.Errorf("connection %v -> %v tracked in a full table", client, server)
		}
		transfer(t, c1, c2, e2.IPs[1], 4<<20)
		n.mustXlane(&st, "ct", "stats")
		t.Logf("ct stats when full: %+v", st)
		if st.TableFull == 0 {
			t.Errorf("table_full_packets = 0 after connections through a full table: %+v", st)
		}
		if st.Entries != size {
			t.Errorf("%d entries, want %d", st.Entries, size)
		}
	})
}

// TestCTSizeFlag: --ct-size other than the default sizes the table.
func TestCTSizeFlag(t *testing.T) {
	const size = 1_000_064
	n := newNode(t, func(n *node) { n.flags = append(n.flags, "--ct-size", fmt.Sprint(size)) })
	var st api.CTStats
	o, e, err := n.xlane("ct", "stats", "-o", "json")
	if err != nil {
		st2, _, _ := n.xlane("status")
		t.Fatalf("xlaned --ct-size %d: xlane ct stats: %v: %s\nxlane status:\n%s", size, err, e, st2)
	}
	if err := json.Unmarshal([]byte(o), &st); err != nil || st.MaxEntries != size {
		t.Errorf("ct stats %q (%v): want max_entries %d", o, err, size)
	}
}
