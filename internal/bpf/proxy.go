package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
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

// Proxy exemption kinds and the counter count, from bpf/lib/proxy.h.
const (
	ProxyExemptMark   = uint8(sockproxyProxyExemptPROXY_EXEMPT_MARK)
	ProxyExemptCgroup = uint8(sockproxyProxyExemptPROXY_EXEMPT_CGROUP)
	ProxyExemptUID    = uint8(sockproxyProxyExemptPROXY_EXEMPT_UID)
	ProxyStatMax      = sockproxyProxyStatPROXY_STAT_MAX
)

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

func ProxyStatNames() ([]string, error) { return enumNames(loadSockproxy, "proxy_stat") }
