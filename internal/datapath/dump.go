package datapath

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xlane-dev/xlane/internal/bpf"
	"github.com/xlane-dev/xlane/internal/ktime"
	"github.com/xlane-dev/xlane/internal/model"
)

// MapDump is one map in readable form (`xlane bpf dump`): addresses,
// ports, protocols, flags and reasons decoded, a row per entry with the
// columns in order.
type MapDump struct {
	Name       string   // the dump's name (ct, endpoints, ...)
	Map        string   // the BPF map(s) read
	Type       string   // the map type
	MaxEntries uint32   // of Map
	Columns    []string // names of the row values, in order
	Rows       [][]any  // strings and numbers
	Truncated  bool     // limit reached
}

// ErrNoSuchMap: a dump name that is neither a decoded map nor a loaded
// map's name.
var ErrNoSuchMap = errors.New("no such map")

// dumper decodes the map(s) behind one name.
type dumper struct {
	name, maps, help string
	columns          []string
	rows             func(d *BPF, limit int, add func(...any) bool) error
}

// dumpers are the maps `xlane bpf dump` decodes, by the name it takes.
// Other loaded maps (the socket layer's, a map added later) dump raw, by
// their BPF name, keys and values in hex.
var dumpers = []dumper{
	{"ct", "xlane_ct", "conntrack: one entry per direction of a flow", ctColumns, dumpCT(false)},
	{"nat", "xlane_ct", "the conntrack entries that translate (SNAT, DNAT, both)", ctColumns, dumpCT(true)},
	{"endpoints", "xlane_endpoints", "endpoint addresses and their devices", []string{"addr", "ifindex", "device", "network_id", "mac", "host_mac", "mtu", "flags"}, (*BPF).dumpEndpoints},
	{"metrics", "xlane_metrics,xlane_metrics_uplink", "per-device counters by reason, direction and deciding attach point (summed over CPUs; the uplink program's from xlane_metrics_uplink)", []string{"ifindex", "device", "reason", "direction", "hook", "packets", "bytes"}, (*BPF).dumpMetrics},
	{"neigh", "xlane_neigh", "the XDP datapath's copy of the neighbour table", []string{"addr", "ifindex", "device", "mac"}, (*BPF).dumpNeigh},
	{"devmap", "xlane_devmap", "devices XDP may redirect to", []string{"ifindex", "device"}, (*BPF).dumpDevmap},
	{"config", "xlane_config", "the node: uplink, masquerade addresses and ports, cluster addresses", []string{"uplink_ifindex", "uplink", "nat_ports", "masquerade_v4", "masquerade_v6", "netns_cookie", "cluster_v4", "cluster_v6"}, (*BPF).dumpConfig},
	{"publish", "xlane_publish", "published ports", []string{"proto", "family", "node_port", "target"}, (*BPF).dumpPublish},
	{"services", "xlane_services", "service VIPs", []string{"vip", "proto", "id", "maglev_size", "flags", "affinity_timeout"}, (*BPF).dumpServices},
	{"backends", "xlane_backends", "service backends by (service id, index)", []string{"service_id", "index", "backend", "flags"}, (*BPF).dumpBackends},
	{"affinity", "xlane_affinity", "ClientIP affinity: each client's backend per service and the age of its last new flow", []string{"service_id", "client", "backend_index", "backend", "idle_s"}, (*BPF).dumpAffinity},
	{"maglev", "xlane_maglev", "each service's Maglev table: slots per backend index, and a digest of the whole table (equal on every node that has the same backends)", []string{"service_id", "slots", "per_backend", "digest"}, (*BPF).dumpMaglev},
	{"fw-state", "xlane_fw_state", "the firewall's live generation", []string{"on", "active_slot", "generation"}, (*BPF).dumpFwState},
	{"fw-gens", "xlane_fw_gens", "what each generation's classifier looks at", []string{"slot", "fields", "established", "uplink"}, (*BPF).dumpFwGens},
	{"fw-rules", "xlane_fw_rules", "the live generation's rules by bit (priority order)", []string{"bit", "counter_slot", "action", "default", "log_sample"}, (*BPF).dumpFwRules},
	{"fw-counters", "xlane_fw_counters", "rule counters by slot (hit slots only, summed over CPUs)", []string{"slot", "packets", "bytes", "last_hit_ns"}, (*BPF).dumpFwCounters},
	{"fw-exact", "xlane_fw_exact", "the live generation's exact-match classes (hook contexts, MACs) and the uplink's IPv4 tuples (class: the rule's bit)", []string{"field", "kind", "value", "class"}, (*BPF).dumpFwExact},
	{"fw-addr", "xlane_fw_addr", "the live generation's address prefixes and their classes", []string{"field", "prefix", "class"}, (*BPF).dumpFwAddr},
	{"fw-scalar", "xlane_fw_scalar", "the live generation's port, protocol and TCP flag classes, as ranges", []string{"field", "from", "to", "class"}, (*BPF).dumpFwScalar},
	{"fw-pool", "xlane_fw_pool", "the live generation's classes: the rule bits each matches", []string{"class", "rules", "bits"}, (*BPF).dumpFwPool},
	{"fw-ddos", "xlane_fw_ddos", "the uplink's DDoS limits", []string{"flags", "pps", "burst", "syn_pps", "syn_burst", "v4_prefix", "v6_prefix"}, (*BPF).dumpFwDDoS},
	{"fw-block", "xlane_fw_block4,xlane_fw_block6", "the uplink's blocklist", []string{"prefix"}, (*BPF).dumpFwBlock},
	{"fw-rate", "xlane_fw_rate", "per-source token buckets of the uplink's rate limits", []string{"source", "tokens", "syn_tokens", "last_refill_ns"}, (*BPF).dumpFwRate},
}

var ctColumns = []string{"proto", "src", "dst", "dir", "state", "nat", "nat_to", "nat_src", "packets", "bytes", "expires_in_s"}

// rawTypes are the map types a raw dump can walk.
var rawTypes = map[ebpf.MapType]bool{
	ebpf.Hash: true, ebpf.LRUHash: true, ebpf.Array: true, ebpf.LPMTrie: true,
	ebpf.PerCPUHash: true, ebpf.LRUCPUHash: true,
}

// DumpNames lists what DumpMap takes: the decoded names, then the BPF
// names of other loaded maps that can be walked.
func (d *BPF) DumpNames() []string {
	var out []string
	covered := map[string]bool{}
	for _, x := range dumpers {
		out = append(out, x.name)
		for _, m := range strings.Split(x.maps, ",") {
			covered[m] = true
		}
	}
	var raw []string
	for name, m := range d.objs.Maps() {
		// Per-CPU arrays are the programs' scratch space (the counters
		// among them are decoded above).
		if !covered[name] && rawTypes[m.Type()] && m.Type() != ebpf.PerCPUArray {
			raw = append(raw, name)
		}
	}
	sort.Strings(raw)
	return append(out, raw...)
}

// DumpHelp says what a decoded name shows ("" for raw ones).
func DumpHelp(name string) string {
	for _, x := range dumpers {
		if x.name == name {
			return x.help
		}
	}
	return ""
}

// DumpMap reads the map(s) behind name (a DumpNames entry, or the BPF
// name of a decoded map: xlane_ct is ct), at most limit rows (0: all).
func (d *BPF) DumpMap(name string, limit int) (*MapDump, error) {
	for _, x := range dumpers {
		if x.name != name && x.maps != name {
			continue
		}
		first, _, _ := strings.Cut(x.maps, ",")
		m := d.objs.Maps()[first]
		if m == nil {
			return nil, fmt.Errorf("map %s is not loaded here", first)
		}
		out := &MapDump{Name: x.name, Map: x.maps, Type: m.Type().String(), MaxEntries: m.MaxEntries(), Columns: x.columns}
		if m.Type() == ebpf.ArrayOfMaps { // the firewall's: show the live generation's inner map
			if inner, err := d.liveInner(m); err == nil && inner != nil {
				out.Type, out.MaxEntries = inner.Type().String()+" (live generation)", inner.MaxEntries()
				inner.Close()
			}
		}
		err := x.rows(d, limit, func(vals ...any) bool {
			if limit > 0 && len(out.Rows) >= limit {
				out.Truncated = true
				return false
			}
			out.Rows = append(out.Rows, vals)
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("dump %s: %w", x.maps, err)
		}
		return out, nil
	}
	for _, n := range d.DumpNames() {
		if n == name && strings.HasPrefix(n, "xlane_") {
			return d.dumpRaw(name, limit)
		}
	}
	return nil, fmt.Errorf("%q: %w; the maps are: %s", name, ErrNoSuchMap, strings.Join(d.DumpNames(), ", "))
}

// dumpRaw walks a map without a decoder: keys and values in hex.
func (d *BPF) dumpRaw(name string, limit int) (*MapDump, error) {
	m := d.objs.Maps()[name]
	out := &MapDump{Name: name, Map: name, Type: m.Type().String(), MaxEntries: m.MaxEntries(), Columns: []string{"key", "value"}}
	var (
		k []byte
		v []byte
	)
	perCPU := m.Type() == ebpf.PerCPUHash || m.Type() == ebpf.LRUCPUHash
	var vs [][]byte
	it := m.Iterate()
	for {
		var ok bool
		if perCPU {
			ok = it.Next(&k, &vs)
		} else {
			ok = it.Next(&k, &v)
		}
		if !ok {
			break
		}
		if limit > 0 && len(out.Rows) >= limit {
			out.Truncated = true
			break
		}
		val := hex.EncodeToString(v)
		if perCPU {
			parts := make([]string, len(vs))
			for i := range vs {
				parts[i] = hex.EncodeToString(vs[i])
			}
			val = strings.Join(parts, " ")
		}
		out.Rows = append(out.Rows, []any{hex.EncodeToString(k), val})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("dump %s: %w", name, err)
	}
	return out, nil
}

// walk iterates m as K -> V, stopping when add says so.
func walk[K, V any](m *ebpf.Map, fn func(k *K, v *V) bool) error {
	var (
		k K
		v V
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !fn(&k, &v) {
			return nil
		}
	}
	return it.Err()
}

func devName(ifindex uint32) string {
	if ifindex == 0 {
		return ""
	}
	if ifi, err := net.InterfaceByIndex(int(ifindex)); err == nil {
		return ifi.Name
	}
	return "?"
}

func addr16(b [16]uint8) string { return netip.AddrFrom16(b).Unmap().String() }

func mac(b [6]uint8) string { return net.HardwareAddr(b[:]).String() }

func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

func hostPort(b [16]uint8, port uint16) string {
	return netip.AddrPortFrom(netip.AddrFrom16(b).Unmap(), ntohs(port)).String()
}

func dumpCT(natOnly bool) func(*BPF, int, func(...any) bool) error {
	return func(d *BPF, _ int, add func(...any) bool) error {
		fs, err := d.Flows(0)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if natOnly && f.NAT == "" {
				continue
			}
			dir := "original"
			if f.Reply {
				dir = "reply"
			}
			natTo, natSrc := "", ""
			if f.NAT != "" {
				natTo = f.NATTo.String()
			}
			if f.NATSrc.IsValid() {
				natSrc = f.NATSrc.String()
			}
			if !add(protoName(f.Proto), f.Src.String(), f.Dst.String(), dir, f.State, f.NAT, natTo, natSrc, f.Packets, f.Bytes, f.ExpiresInSeconds) {
				return nil
			}
		}
		return nil
	}
}

var epFlagNames = []struct {
	bit  uint16
	name string
}{{bpf.EPFlagXDPTarget, "xdp-target"}, {bpf.EPFlagMasquerade, "masquerade"}, {bpf.EPFlagNoICC, "no-icc"},
	{bpf.EPFlagIsolated, "isolated"}, {bpf.EPFlagAllowUnsolicited, "allow-unsolicited"}, {bpf.EPFlagNoPeer, "no-peer"}}

func flagNames(f uint16) string {
	var out []string
	for _, n := range epFlagNames {
		if f&n.bit != 0 {
			out = append(out, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		out = append(out, fmt.Sprintf("0x%x", f))
	}
	return strings.Join(out, ",")
}

func (d *BPF) dumpEndpoints(_ int, add func(...any) bool) error {
	return walk(d.objs.Endpoints(), func(k *bpf.EndpointKey, v *bpf.EndpointVal) bool {
		return add(addr16(k.Addr), v.Ifindex, devName(v.Ifindex), v.NetworkId, mac(v.Mac), mac(v.HostMac), v.Mtu, flagNames(v.Flags))
	})
}

func (d *BPF) dumpMetrics(_ int, add func(...any) bool) error {
	var (
		k    bpf.MetricsKey
		vals []bpf.MetricsVal
	)
	// The uplink's array (xlane_metrics_uplink) adds to the hash's rows.
	up := map[bpf.MetricsKey]model.Counter{}
	if err := d.uplinkCounters(func(ifindex int, ck CounterKey, c model.Counter) {
		key := bpf.MetricsKey{Ifindex: uint32(ifindex), Reason: uint8(ck.Reason), Dir: uint8(ck.Dir), Hook: uint8(ck.Hook)}
		o := up[key]
		o.Add(c)
		up[key] = o
	}); err != nil {
		return err
	}
	row := func(k bpf.MetricsKey, c model.Counter) bool {
		return add(k.Ifindex, devName(k.Ifindex), bpf.Reason(k.Reason).String(), bpf.Dir(k.Dir).String(), bpf.Hook(k.Hook).String(), c.Packets, c.Bytes)
	}
	it := d.objs.Metrics().Iterate()
	for it.Next(&k, &vals) {
		c := up[k]
		delete(up, k)
		for _, v := range vals {
			c.Add(model.Counter{Packets: v.Packets, Bytes: v.Bytes})
		}
		if !row(k, c) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for k, c := range up {
		if !row(k, c) {
			return nil
		}
	}
	return nil
}

func (d *BPF) dumpNeigh(_ int, add func(...any) bool) error {
	return walk(d.objs.Neigh(), func(k *bpf.NeighKey, v *bpf.NeighVal) bool {
		return add(addr16(k.Addr), k.Ifindex, devName(k.Ifindex), mac(v.Mac))
	})
}

func (d *BPF) dumpDevmap(_ int, add func(...any) bool) error {
	return walk(d.objs.Devmap(), func(k *uint32, _ *uint32) bool { return add(*k, devName(*k)) })
}

func (d *BPF) dumpConfig(_ int, add func(...any) bool) error {
	var v bpf.Config
	if err := d.objs.Config().Lookup(uint32(0), &v); err != nil {
		return err
	}
	opt := func(b [16]uint8) string {
		if b == [16]uint8{} {
			return ""
		}
		return addr16(b)
	}
	add(v.UplinkIfindex, devName(v.UplinkIfindex), fmt.Sprintf("%d-%d", v.NatPortMin, v.NatPortMax), opt(v.UplinkV4), opt(v.UplinkV6), v.NetnsCookie, opt(v.ClusterV4), opt(v.ClusterV6))
	return nil
}

func (d *BPF) dumpPublish(_ int, add func(...any) bool) error {
	return walk(d.objs.Publish(), func(k *bpf.PublishKey, v *bpf.PublishVal) bool {
		return add(protoName(k.Proto), fmt.Sprintf("ipv%d", k.Family), ntohs(k.Port), hostPort(v.Addr, v.Port))
	})
}

func (d *BPF) dumpServices(_ int, add func(...any) bool) error {
	return walk(d.objs.Services(), func(k *bpf.ServiceKey, v *bpf.ServiceVal) bool {
		flags := ""
		if v.Flags&bpf.SvcAffinity != 0 {
			flags = "affinity"
		}
		return add(hostPort(k.Addr, k.Port), protoName(k.Proto), v.Id, v.MaglevSize, flags, v.AffinityTimeout)
	})
}

func (d *BPF) dumpBackends(_ int, add func(...any) bool) error {
	return walk(d.objs.Backends(), func(k *bpf.BackendKey, v *bpf.BackendVal) bool {
		flags := ""
		if v.Flags&bpf.BackendDraining != 0 {
			flags = "draining"
		}
		return add(k.Service, k.Index, hostPort(v.Addr, v.Port), flags)
	})
}

// dumpAffinity lists xlane_affinity; idle_s is the seconds since the
// client's last new flow (CLOCK_MONOTONIC, bpf_ktime_get_ns's clock). A
// client of all zeros is the node's own processes.
func (d *BPF) dumpAffinity(_ int, add func(...any) bool) error {
	now := ktime.Now()
	return walk(d.objs.Affinity(), func(k *bpf.AffinityKey, v *bpf.AffinityVal) bool {
		client := "node"
		if k.Client != ([16]byte{}) {
			client = netip.AddrFrom16(k.Client).Unmap().String()
		}
		idle := 0.0
		if now > v.Last {
			idle = float64(now-v.Last) / 1e9
		}
		return add(k.Service, client, v.Index, hostPort(v.Addr, v.Port), fmt.Sprintf("%.1f", idle))
	})
}

// dumpMaglev counts each table's slots per backend index ("0:511 1:510")
// and digests the table (SHA-256 of the backend index of every slot, in
// slot order; the first 16 hex digits): two nodes pick the same backend
// index for every flow exactly when their digests are equal.
func (d *BPF) dumpMaglev(_ int, add func(...any) bool) error {
	var (
		id    uint32
		inner *ebpf.Map
	)
	it := d.objs.Maglev().Iterate()
	for it.Next(&id, &inner) {
		per := map[uint32]int{}
		size := int(inner.MaxEntries())
		slots := make([]byte, 4*size)
		err := walk(inner, func(k *uint32, v *uint32) bool {
			per[*v]++
			if int(*k) < size {
				binary.LittleEndian.PutUint32(slots[4**k:], *v)
			}
			return true
		})
		inner.Close()
		if err != nil {
			return fmt.Errorf("service %d table: %w", id, err)
		}
		idx := make([]uint32, 0, len(per))
		for i := range per {
			idx = append(idx, i)
		}
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
		parts := make([]string, len(idx))
		for j, i := range idx {
			parts[j] = fmt.Sprintf("%d:%d", i, per[i])
		}
		sum := sha256.Sum256(slots)
		if !add(id, size, strings.Join(parts, " "), hex.EncodeToString(sum[:8])) {
			return nil
		}
	}
	return it.Err()
}

func (d *BPF) fwState() (bpf.FwState, error) {
	var st bpf.FwState
	err := d.objs.Firewall().State.Lookup(uint32(0), &st)
	return st, err
}

func (d *BPF) dumpFwState(_ int, add func(...any) bool) error {
	st, err := d.fwState()
	if err != nil {
		return err
	}
	add(st.On != 0, st.Active, st.Generation)
	return nil
}

var fwFieldNames = []string{"ctx", "smac", "dmac", "src", "dst", "proto", "sport", "dport", "flags"}

func fwFieldName(f uint8) string {
	if int(f) < len(fwFieldNames) {
		return fwFieldNames[f]
	}
	return fmt.Sprint(f)
}

func (d *BPF) dumpFwGens(_ int, add func(...any) bool) error {
	return walk(d.objs.Firewall().Gens, func(k *uint32, v *bpf.FwGen) bool {
		var fields []string
		for i := range bpf.FwFieldMax {
			if v.Fields&(1<<i) != 0 {
				fields = append(fields, fwFieldNames[i])
			}
		}
		uplink := "bitmaps"
		switch {
		case v.Lin != 0:
			uplink = fmt.Sprintf("list of %d", v.Lin-1)
		case v.Tuple4 != 0 && v.Tuple4Miss != 0:
			uplink = fmt.Sprintf("tuple4 (miss: bit %d), IPv6 bitmaps", v.Tuple4Miss-1)
		case v.Tuple4 != 0:
			uplink = "tuple4 (miss: allowed), IPv6 bitmaps"
		}
		return add(*k, strings.Join(fields, ","), v.Established != 0, uplink)
	})
}

// liveInner opens the live generation's inner map of outer (nil, nil
// when the firewall is off).
func (d *BPF) liveInner(outer *ebpf.Map) (*ebpf.Map, error) {
	st, err := d.fwState()
	if err != nil || st.On == 0 {
		return nil, err
	}
	var inner *ebpf.Map
	if err := outer.Lookup(st.Active, &inner); err != nil {
		return nil, fmt.Errorf("live generation (slot %d): %w", st.Active, err)
	}
	return inner, nil
}

func (d *BPF) withLive(outer *ebpf.Map, fn func(*ebpf.Map) error) error {
	inner, err := d.liveInner(outer)
	if err != nil || inner == nil {
		return err
	}
	defer inner.Close()
	return fn(inner)
}

// dumpFwRules lists the live generation's rules. The array has room for
// FW_MAX_RULES; the set's end is the last bit some class other than
// FW_CLASS_ALL matches (every rule's bit is in the classes of the values
// it matches) or the last non-empty entry, whichever is later.
func (d *BPF) dumpFwRules(_ int, add func(...any) bool) error {
	n := -1
	err := d.withLive(d.objs.Firewall().Pool, func(m *ebpf.Map) error {
		for c := uint32(1); c < m.MaxEntries(); c++ {
			var b bpf.FwBits
			if err := m.Lookup(c, &b); err != nil {
				return err
			}
			for w := len(b.W) - 1; w >= 0; w-- {
				if b.W[w] != 0 {
					n = max(n, w*64+63-bits.LeadingZeros64(b.W[w]))
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return d.withLive(d.objs.Firewall().Rules, func(m *ebpf.Map) error {
		rules := make([]bpf.FwRule, m.MaxEntries())
		keys := make([]uint32, m.MaxEntries())
		var cursor ebpf.MapBatchCursor
		got, err := m.BatchLookup(&cursor, keys, rules, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		for i := got - 1; i > n; i-- {
			if rules[i] != (bpf.FwRule{}) {
				n = i
				break
			}
		}
		for bit := 0; bit <= n && bit < got; bit++ {
			r := rules[bit]
			if !add(keys[bit], r.Slot, bpf.FwActionName(r.Action), r.IsDefault != 0, r.Sample) {
				return nil
			}
		}
		return nil
	})
}

func (d *BPF) dumpFwCounters(_ int, add func(...any) bool) error {
	var (
		slot uint32
		vals []bpf.FwCounter
	)
	it := d.objs.Firewall().Counters.Iterate()
	for it.Next(&slot, &vals) {
		var c bpf.FwCounter
		for _, v := range vals {
			c.Packets += v.Packets
			c.Bytes += v.Bytes
			c.LastHit = max(c.LastHit, v.LastHit)
		}
		if c.Packets == 0 {
			continue
		}
		if !add(slot, c.Packets, c.Bytes, c.LastHit) {
			return nil
		}
	}
	return it.Err()
}

var fwKindNames = []string{"from-endpoint", "to-endpoint", "uplink"}

func (d *BPF) dumpFwExact(_ int, add func(...any) bool) error {
	return d.withLive(d.objs.Firewall().Exact, func(m *ebpf.Map) error {
		return walk(m, func(k *bpf.FwExactKey, class *uint32) bool {
			var kind, val string
			if k.Field == bpf.FwExactTuple4 {
				// The uplink's IPv4 tuples: the class is the rule's bit.
				src := netip.AddrFrom4([4]byte(k.Data[:4]))
				return add("tuple4", fmt.Sprintf("proto %d", k.Kind),
					fmt.Sprintf("%s dport %d", src, binary.NativeEndian.Uint16(k.Data[4:])), *class)
			}
			if k.Field == bpf.FwFieldCtx {
				if int(k.Kind) < len(fwKindNames) {
					kind = fwKindNames[k.Kind]
				}
				val = fmt.Sprintf("network %d", uint32(k.Data[0])|uint32(k.Data[1])<<8|uint32(k.Data[2])<<16|uint32(k.Data[3])<<24)
			} else {
				val = mac(k.Data)
			}
			return add(fwFieldName(k.Field), kind, val, *class)
		})
	})
}

func (d *BPF) dumpFwAddr(_ int, add func(...any) bool) error {
	return d.withLive(d.objs.Firewall().Addr, func(m *ebpf.Map) error {
		return walk(m, func(k *bpf.FwAddrKey, class *uint32) bool {
			bitsLen := int(k.Prefixlen) - 8
			var p netip.Prefix
			if k.Field&bpf.FwAddrV6 != 0 {
				p = netip.PrefixFrom(netip.AddrFrom16(k.Addr), bitsLen)
			} else {
				p = netip.PrefixFrom(netip.AddrFrom4([4]byte(k.Addr[:4])), bitsLen)
			}
			return add(fwFieldName(k.Field&^bpf.FwAddrV6), p.String(), *class)
		})
	})
}

// dumpFwScalar shows the scalar array (131,586 classes: every port of
// both port fields, every protocol, every TCP flags byte) as ranges of
// one class.
func (d *BPF) dumpFwScalar(_ int, add func(...any) bool) error {
	return d.withLive(d.objs.Firewall().Scalar, func(m *ebpf.Map) error {
		sections := []struct {
			field      string
			start, end uint32 // [start, end)
		}{
			{"sport", bpf.FwScSport, bpf.FwScDport},
			{"dport", bpf.FwScDport, bpf.FwScProto},
			{"proto", bpf.FwScProto, bpf.FwScFlags},
			{"flags", bpf.FwScFlags, bpf.FwScSize},
		}
		vals := make([]uint32, m.MaxEntries())
		keys := make([]uint32, m.MaxEntries())
		var cursor ebpf.MapBatchCursor
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		class := make([]uint32, m.MaxEntries())
		for i := range n {
			class[keys[i]] = vals[i]
		}
		for _, s := range sections {
			from := s.start
			for i := s.start + 1; i <= s.end; i++ {
				if i < s.end && class[i] == class[from] {
					continue
				}
				lo, hi := fmt.Sprint(from-s.start), fmt.Sprint(i-1-s.start)
				if (s.field == "sport" || s.field == "dport") && i-1-s.start == bpf.FwNoL4 {
					hi = "no-l4"
					if from-s.start == bpf.FwNoL4 {
						lo = "no-l4"
					}
				}
				if !add(s.field, lo, hi, class[from]) {
					return nil
				}
				from = i
			}
		}
		return nil
	})
}

// dumpFwPool lists each class's rule bits (the first 16, then a count).
func (d *BPF) dumpFwPool(_ int, add func(...any) bool) error {
	return d.withLive(d.objs.Firewall().Pool, func(m *ebpf.Map) error {
		for c := uint32(0); c < m.MaxEntries(); c++ {
			var b bpf.FwBits
			if err := m.Lookup(c, &b); err != nil {
				return err
			}
			var set []string
			count := 0
			for w, word := range b.W {
				count += bits.OnesCount64(word)
				for word != 0 && len(set) < 16 {
					i := bits.TrailingZeros64(word)
					set = append(set, fmt.Sprint(w*64+i))
					word &^= 1 << i
				}
			}
			s := strings.Join(set, ",")
			if count > len(set) {
				s += fmt.Sprintf(",... (%d)", count)
			}
			if !add(c, count, s) {
				return nil
			}
		}
		return nil
	})
}

func (d *BPF) dumpFwDDoS(_ int, add func(...any) bool) error {
	var v bpf.FwDdos
	if err := d.objs.Firewall().DDoS.Lookup(uint32(0), &v); err != nil {
		return err
	}
	var flags []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{{bpf.FwDdosBlocklist, "blocklist"}, {bpf.FwDdosRate, "rate"}, {bpf.FwDdosSYN, "syn"}, {bpf.FwDdosMalformed, "malformed"}} {
		if v.Flags&f.bit != 0 {
			flags = append(flags, f.name)
		}
	}
	add(strings.Join(flags, ","), v.Pps, v.Burst, v.SynPps, v.SynBurst, v.V4Prefix, v.V6Prefix)
	return nil
}

func (d *BPF) dumpFwBlock(_ int, add func(...any) bool) error {
	fw := d.objs.Firewall()
	more := true
	err := walk(fw.Block4, func(k *bpf.FwBlock4Key, _ *uint32) bool {
		more = add(netip.PrefixFrom(netip.AddrFrom4(k.Addr), int(k.Prefixlen)).String())
		return more
	})
	if err != nil || !more {
		return err
	}
	return walk(fw.Block6, func(k *bpf.FwBlock6Key, _ *uint32) bool {
		return add(netip.PrefixFrom(netip.AddrFrom16(k.Addr), int(k.Prefixlen)).String())
	})
}

func (d *BPF) dumpFwRate(_ int, add func(...any) bool) error {
	return walk(d.objs.Firewall().Rate, func(k *bpf.FwRateKey, v *bpf.FwRateVal) bool {
		// Tokens are kept in packets x 1e9.
		return add(addr16(k.Addr), v.Tokens/1e9, v.SynTokens/1e9, v.Last)
	})
}
