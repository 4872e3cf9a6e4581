package accel

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// SetConfig writes the filters, then the flags, of a loaded copy of the
// acceleration programs (the daemon's pinned one or the self-test's):
// on=false stops new sockets from being added and makes every accelerated
// socket fall back to the normal path at its next message. nets nil means
// no address filter; ports nil, no port filter.
func SetConfig(objs *bpf.AccelObjects, on bool, nets []netip.Prefix, ports []uint16) error {
	if err := clearMap(objs.Nets()); err != nil {
		return err
	}
	for _, n := range nets {
		k := bpf.AccelNetKey{Prefixlen: uint32(n.Bits()), Addr: n.Addr().As16()}
		if n.Addr().Is4() {
			k.Prefixlen += 96
		}
		if err := objs.Nets().Put(&k, uint8(1)); err != nil {
			return fmt.Errorf("write accelerated net %s: %w", n, err)
		}
	}
	if err := clearMap(objs.Ports()); err != nil {
		return err
	}
	for _, p := range ports {
		if err := objs.Ports().Put(p, uint8(1)); err != nil {
			return fmt.Errorf("write accelerated port %d: %w", p, err)
		}
	}
	c := bpf.AccelConfig{MaxBacklog: MaxBacklog(), SmallMsg: SmallMsg, SmallBacklog: SmallBacklog}
	if on {
		c.Flags = bpf.AccelOn
		if len(nets) > 0 {
			c.Flags |= bpf.AccelFilterNets
		}
		if len(ports) > 0 {
			c.Flags |= bpf.AccelFilterPorts
		}
	}
	if err := objs.Config().Put(uint32(0), &c); err != nil {
		return fmt.Errorf("write acceleration config: %w", err)
	}
	return nil
}

// MaxBacklog is what SetConfig writes as accel_config.max_backlog: the
// most a peer may have unread in its redirect queue before the direction
// falls back to the normal path. The redirect path has no flow control of
// its own; this bounds it by what the normal path would let a writer get
// ahead of its reader, the largest TCP receive buffer of this network
// namespace (net.ipv4.tcp_rmem's maximum), or 4 MiB where that cannot be
// read. At least 1 MiB, at most 1 GiB.
func MaxBacklog() uint32 {
	n := uint64(4 << 20)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			if v, err := strconv.ParseUint(f[2], 10, 64); err == nil {
				n = v
			}
		}
	}
	return uint32(min(max(n, 1<<20), 1<<30))
}

// SmallMsg and SmallBacklog are what SetConfig writes as
// accel_config.small_msg and small_backlog: a message shorter than
// SmallMsg, redirected while the peer has more than SmallBacklog unread
// (a reader falling behind a stream of small writes, which ping-pong
// never is), makes its direction fall back to the normal path for good
// (fallback_small_stream), which coalesces small writes and is faster for
// them. 1 KiB: 64-byte writes are small, iperf3's 1448-byte ones are not
// (measured, docs/accel.md: with 4 KiB their streams fell back and cost
// 1.1-1.6x plain TCP's CPU per byte, on the fast path 0.8-1.2x, except the
// proxied chain with one stream); 128 KiB: far above any request/response
// exchange, far below max_backlog.
const (
	SmallMsg     = 1 << 10
	SmallBacklog = 128 << 10
)

// SetOn flips only the on flag of the config map m (the self-test child,
// which has the map but not the objects).
func SetOn(m *ebpf.Map, on bool) error {
	var c bpf.AccelConfig
	if err := m.Lookup(uint32(0), &c); err != nil {
		return err
	}
	if on {
		c.Flags |= bpf.AccelOn
	} else {
		c.Flags &^= bpf.AccelOn
	}
	return m.Put(uint32(0), &c)
}

func clearMap(m *ebpf.Map) error {
	var keys [][]byte
	k := make([]byte, m.KeySize())
	it := m.Iterate()
	v := make([]byte, m.ValueSize())
	for it.Next(&k, &v) {
		keys = append(keys, append([]byte(nil), k...))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", m, err)
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear %s: %w", m, err)
		}
	}
	return nil
}

// AttachMsg attaches the sk_msg program to the SOCKHASH (an attachment of
// the map: it lives as long as the map, pinned or not, and needs no link).
func AttachMsg(objs *bpf.AccelObjects) error {
	err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: objs.Socks().FD(),
		Program: objs.Msg(), Attach: ebpf.AttachSkMsgVerdict})
	if err != nil {
		return fmt.Errorf("attach sk_msg to the socket map: %w", err)
	}
	return nil
}

// DetachMsg undoes AttachMsg (sockets already in the map keep the program
// they were added with until they leave it).
func DetachMsg(objs *bpf.AccelObjects) error {
	return link.RawDetachProgram(link.RawDetachProgramOptions{Target: objs.Socks().FD(),
		Program: objs.Msg(), Attach: ebpf.AttachSkMsgVerdict})
}

// ReadStats sums the per-CPU counters of stats (xlane_accel_stats) by
// name (bpf.AccelStatNames).
func ReadStats(stats *ebpf.Map) (map[string]uint64, error) {
	names, err := bpf.AccelStatNames()
	if err != nil {
		return nil, err
	}
	return readPerCPU(stats, names)
}

// ReadProxyStats is ReadStats for xlane_proxy_stats.
func ReadProxyStats(stats *ebpf.Map) (map[string]uint64, error) {
	names, err := bpf.ProxyStatNames()
	if err != nil {
		return nil, err
	}
	return readPerCPU(stats, names)
}

func readPerCPU(m *ebpf.Map, names []string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, n := range names {
		var per []uint64
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read counter %s: %w", n, err)
		}
		var s uint64
		for _, v := range per {
			s += v
		}
		out[n] = s
	}
	return out, nil
}
