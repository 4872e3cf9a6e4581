package bpf

import (
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/cilium/ebpf"
)

// Socket acceleration types, generated from bpf/lib/accel.h.
type (
	AccelKey    = sockaccelAccelKey
	AccelSk     = sockaccelAccelSk
	AccelConfig = sockaccelAccelConfig
	AccelNetKey = sockaccelAccelNetKey
	AccelStat   = sockaccelAccelStat
)

// Accel flags and the counter count, from bpf/lib/accel.h.
const (
	AccelOn           = uint32(sockaccelAccelFlagsACCEL_ON)
	AccelFilterNets   = uint32(sockaccelAccelFlagsACCEL_FILTER_NETS)
	AccelFilterPorts  = uint32(sockaccelAccelFlagsACCEL_FILTER_PORTS)
	AccelStatMax      = sockaccelAccelStatACCEL_STAT_MAX
	AccelSkFallback   = uint32(sockaccelAccelSkFlagsACCEL_SK_FALLBACK)
	ProxyExemptMark   = uint8(sockproxyProxyExemptPROXY_EXEMPT_MARK)
	ProxyExemptCgroup = uint8(sockproxyProxyExemptPROXY_EXEMPT_CGROUP)
	ProxyExemptUID    = uint8(sockproxyProxyExemptPROXY_EXEMPT_UID)
	ProxyStatMax      = sockproxyProxyStatPROXY_STAT_MAX
)

// Transparent proxy types, generated from bpf/lib/proxy.h.
type (
	ProxyVal     = sockproxyProxyVal
	ProxyOrig    = sockproxyProxyOrig
	ProxyTuple   = sockproxyProxyTuple
	ProxyStat    = sockproxyProxyStat
	ProxyInKey   = sockproxyProxyInKey
	ProxyLsnKey  = sockproxyProxyLsnKey
	ProxyConnKey = sockproxyProxyConnKey
)

// AccelObjects are the socket acceleration programs (bpf/sock_accel.c)
// and their maps.
type AccelObjects struct{ sockaccelObjects }

// Sockops is the program that adds established sockets to the SOCKHASH.
func (o *AccelObjects) Sockops() *ebpf.Program { return o.XlaneAccelSockops }

// Msg is the sk_msg program, attached to the SOCKHASH.
func (o *AccelObjects) Msg() *ebpf.Program { return o.XlaneAccelMsg }

// Socks is the SOCKHASH.
func (o *AccelObjects) Socks() *ebpf.Map { return o.XlaneAccelSocks }

// Config, Nets, Ports and Stats are the daemon's maps (bpf/lib/accel.h).
func (o *AccelObjects) Config() *ebpf.Map { return o.XlaneAccelConfig }
func (o *AccelObjects) Nets() *ebpf.Map   { return o.XlaneAccelNets }
func (o *AccelObjects) Ports() *ebpf.Map  { return o.XlaneAccelPorts }
func (o *AccelObjects) Stats() *ebpf.Map  { return o.XlaneAccelStats }

// ProxyObjects are the transparent redirect programs (bpf/sock_proxy.c)
// and their maps.
type ProxyObjects struct{ sockproxyObjects }

// Programs of ProxyObjects.
func (o *ProxyObjects) Connect4() *ebpf.Program   { return o.XlaneProxyConnect4 }
func (o *ProxyObjects) Connect6() *ebpf.Program   { return o.XlaneProxyConnect6 }
func (o *ProxyObjects) Sockops() *ebpf.Program    { return o.XlaneProxySockops }
func (o *ProxyObjects) Getsockopt() *ebpf.Program { return o.XlaneProxyGetsockopt }

// Rules, Conns and Stats are the maps of ProxyObjects.
func (o *ProxyObjects) Rules() *ebpf.Map { return o.XlaneProxyRules }
func (o *ProxyObjects) Conns() *ebpf.Map { return o.XlaneProxyConns }
func (o *ProxyObjects) Stats() *ebpf.Map { return o.XlaneProxyStats }

// In, InTo, Listeners and InExempt are the inbound redirect's maps
// (bpf/lib/proxy.h).
func (o *ProxyObjects) In() *ebpf.Map        { return o.XlaneProxyIn }
func (o *ProxyObjects) InTo() *ebpf.Map      { return o.XlaneProxyInTo }
func (o *ProxyObjects) Listeners() *ebpf.Map { return o.XlaneProxyListeners }
func (o *ProxyObjects) InExempt() *ebpf.Map  { return o.XlaneProxyInExempt }

// sockSpecOptions pins spec's maps in pinDir, or none of them for "".
func sockSpecOptions(spec *ebpf.CollectionSpec, pinDir string) (*ebpf.CollectionOptions, error) {
	opts := &ebpf.CollectionOptions{}
	if pinDir == "" {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		return opts, nil
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin dir: %w", err)
	}
	if _, err := replaceIncompatiblePins(spec, pinDir); err != nil {
		return nil, err
	}
	opts.Maps.PinPath = pinDir
	return opts, nil
}

// LoadAccel loads the socket acceleration programs with their maps pinned
// in pinDir (adopting pinned ones), or unpinned for "" (the self-test's
// throwaway copy).
func LoadAccel(pinDir string) (*AccelObjects, error) {
	spec, err := loadSockaccel()
	if err != nil {
		return nil, err
	}
	opts, err := sockSpecOptions(spec, pinDir)
	if err != nil {
		return nil, err
	}
	var o AccelObjects
	if err := spec.LoadAndAssign(&o.sockaccelObjects, opts); err != nil {
		return nil, fmt.Errorf("load socket acceleration programs: %w", err)
	}
	return &o, nil
}

// LoadProxy loads the transparent redirect programs, as LoadAccel.
func LoadProxy(pinDir string) (*ProxyObjects, error) {
	spec, err := loadSockproxy()
	if err != nil {
		return nil, err
	}
	opts, err := sockSpecOptions(spec, pinDir)
	if err != nil {
		return nil, err
	}
	var o ProxyObjects
	if err := spec.LoadAndAssign(&o.sockproxyObjects, opts); err != nil {
		return nil, fmt.Errorf("load transparent proxy programs: %w", err)
	}
	return &o, nil
}

// LoadProxyLookup loads the sk_lookup program of inbound redirects for the
// network namespace whose cookie is netns (sk_lookup has no helper telling
// it its namespace: each namespace gets its own copy), sharing the maps
// pinned in pinDir (or, for "", those of objs, a throwaway copy's).
func LoadProxyLookup(pinDir string, objs *ProxyObjects, netns uint64) (*ebpf.Program, error) {
	spec, err := loadSockproxy()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["proxy_netns"].Set(netns); err != nil {
		return nil, fmt.Errorf("set proxy_netns: %w", err)
	}
	opts, err := sockSpecOptions(spec, pinDir)
	if err != nil {
		return nil, err
	}
	if pinDir == "" && objs != nil {
		opts.MapReplacements = map[string]*ebpf.Map{
			"xlane_proxy_in": objs.XlaneProxyIn, "xlane_proxy_listeners": objs.XlaneProxyListeners,
			"xlane_proxy_in_exempt": objs.XlaneProxyInExempt, "xlane_proxy_stats": objs.XlaneProxyStats,
		}
	}
	var o struct {
		Prog *ebpf.Program `ebpf:"xlane_proxy_lookup"`
	}
	if err := spec.LoadAndAssign(&o, opts); err != nil {
		return nil, fmt.Errorf("load inbound redirect program: %w", err)
	}
	return o.Prog, nil
}

// AccelStatNames are the counters' names, from the object's BTF
// (enum accel_stat), indexed by value.
func AccelStatNames() ([]string, error) { return enumNames(loadSockaccel, "accel_stat") }

// ProxyStatNames are the proxy counters' names (enum proxy_stat).
func ProxyStatNames() ([]string, error) { return enumNames(loadSockproxy, "proxy_stat") }

// enumNames reads enum name of a collection's BTF: "ACCEL_SOCK_ADDED"
// becomes "sock_added" (the prefix up to the first '_' dropped, lower
// case), indexed by value; the _MAX entry is left out.
func enumNames(load func() (*ebpf.CollectionSpec, error), name string) ([]string, error) {
	spec, err := load()
	if err != nil {
		return nil, err
	}
	var e *btf.Enum
	if err := spec.Types.TypeByName(name, &e); err != nil {
		return nil, fmt.Errorf("read enum %s: %w", name, err)
	}
	var names []string
	for _, v := range e.Values {
		if strings.HasSuffix(v.Name, "_MAX") {
			continue
		}
		for uint64(len(names)) <= v.Value {
			names = append(names, "")
		}
		n := v.Name
		if i := strings.IndexByte(n, '_'); i >= 0 {
			n = n[i+1:]
		}
		names[v.Value] = strings.ToLower(n)
	}
	return names, nil
}
