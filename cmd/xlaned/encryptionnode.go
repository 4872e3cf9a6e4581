package main

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/xlane-dev/xlane/internal/k8s"
)

// apiServerClear is the API server's addresses and port, which
// --encryption-node leaves clear in Kubernetes mode: the peers' keys come
// from it, so a node whose session is broken (a rotated key not yet
// learnt) must still reach it.
func apiServerClear(kubeconfig, apiServer string) ([]netip.AddrPort, error) {
	rc, err := k8s.RESTConfig(kubeconfig, apiServer)
	if err != nil {
		return nil, fmt.Errorf("--kubernetes: %w", err)
	}
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		u = &url.URL{Host: rc.Host}
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "443"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("encryption-node: the API server's port %q: %w", port, err)
	}
	addrs, err := net.LookupHost(host)
	if err != nil {
		return nil, fmt.Errorf("encryption-node: resolve the API server %q (left clear): %w", host, err)
	}
	var out []netip.AddrPort
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(p)))
		}
	}
	return out, nil
}
