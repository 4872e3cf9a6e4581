// Package accelproxy is the socket layer's control in xlaned: socket
// acceleration (sockops + sk_msg, attached to a cgroup only once the
// self-test passes on this kernel: accel.go, EnableAccel, DisableAccel,
// AccelStatus) and transparent proxy redirects (cgroup connect and
// getsockopt hooks outbound, sk_lookup with the proxy's listeners
// inbound: proxy.go, proxykey.go, AddProxyRedirect, ProxyRedirects,
// DeleteProxyRedirect). Both may use xlane's own cgroup, made when a
// request needs it and removed when nothing does (owncgroup.go).
//
// It owns the records in the store (accel, proxy redirects), their
// validation and the datapath's socket role. The settings, the self-test
// and the counters' types are internal/accel's. It reaches the rest of
// the daemon only through core.Core; the core starts it (Start) once the
// datapath is up: the redirects re-applied, acceleration tested again.
package accelproxy
