package metrics

// The socket layer's BPF counters (enum accel_stat in bpf/lib/accel.h,
// enum proxy_stat in bpf/lib/proxy.h, named as bpf.AccelStatNames and
// bpf.ProxyStatNames read them) mix units: sockets, messages, bytes,
// directions, connections, lookups. Each goes to the metric of its unit
// with the labels below (proxy.go has proxy_stat's);
// TestAccelProxyCountersHaveUnits fails on a BPF counter missing here (a
// new counter must be given its unit).

type unit struct {
	metric Metric
	labels []string
}

var accelUnits = map[string]unit{
	"sock_added":         {AccelSockets, []string{"added"}},
	"sock_skip_filter":   {AccelSockets, []string{"skip_filter"}},
	"sock_skip_inflight": {AccelSockets, []string{"skip_inflight"}},
	"sock_skip_off":      {AccelSockets, []string{"skip_off"}},
	"sock_add_failed":    {AccelSockets, []string{"add_failed"}},

	"msg_redirected":        {AccelMessages, []string{"redirected"}},
	"fallback_no_peer":      {AccelMessages, []string{"fallback_no_peer"}},
	"fallback_sticky":       {AccelMessages, []string{"fallback_sticky"}},
	"fallback_off":          {AccelMessages, []string{"fallback_off"}},
	"fallback_no_state":     {AccelMessages, []string{"fallback_no_state"}},
	"fallback_mem_pressure": {AccelMessages, []string{"fallback_mem_pressure"}},

	"bytes_redirected": {AccelBytes, []string{"redirected"}},
	"fallback_bytes":   {AccelBytes, []string{"fallback"}},

	"fallback_backlog":      {AccelDirections, []string{"backlog"}},
	"fallback_small_stream": {AccelDirections, []string{"small_stream"}},
}
