package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// PathProxy is the API path of transparent proxy redirects.
const PathProxy = "/v1/proxy"

// ProxyRedirect is one transparent redirect (POST /v1/proxy, GET).
type ProxyRedirect struct {
	// Port: TCP connections to this destination port are redirected.
	Port uint16 `json:"port"`
	// To: the proxy's port on loopback (127.0.0.1 / ::1).
	To uint16 `json:"to"`
	// Cgroup whose processes' connections are redirected (and where the
	// proxy runs); empty: xlane's own.
	Cgroup string `json:"cgroup,omitempty"`
	// Direction: "out" (connections the cgroup's processes make; the
	// default) or "in" (connections arriving at Port in Netns, handed to
	// the proxy's listener on To there; the proxy runs in Cgroup).
	Direction string `json:"direction,omitempty"`
	// Netns, with Direction "in": the network namespace where the app
	// listens on Port and the proxy on To (a path such as
	// /run/netns/NAME or /proc/PID/ns/net); empty: xlaned's own.
	Netns string `json:"netns,omitempty"`
	// Network: refused in both directions, with the reason and what to
	// use instead (inbound: one redirect per endpoint namespace with
	// Netns; outbound: Cgroup). Kept so that the request says so rather
	// than silently redirecting in the wrong place.
	Network string `json:"network,omitempty"`
	// How the proxy's own connections are told apart: "mark" (SO_MARK ==
	// Mark), "uid" (UID) or "cgroup" (ExemptCgroup, a cgroup2 path).
	Exempt       string `json:"exempt"`
	Mark         uint32 `json:"mark,omitempty"`
	UID          uint32 `json:"uid,omitempty"`
	ExemptCgroup string `json:"exempt_cgroup,omitempty"`
	// Key, in answers: what names the redirect, "DIRECTION:WHERE:PORT"
	// (WHERE: the network namespace path inbound, "" for xlaned's own;
	// the cgroup outbound), as DeleteProxyRedirect takes it.
	Key string `json:"key,omitempty"`
	// Warning, in answers: something the daemon noticed but did not
	// refuse (nobody listens on To yet).
	Warning string `json:"warning,omitempty"`
}

// ProxyList is GET /v1/proxy.
type ProxyList struct {
	Redirects []ProxyRedirect   `json:"redirects"`
	Counters  map[string]uint64 `json:"counters,omitempty"`
}

func (c *Client) AddProxyRedirect(ctx context.Context, r ProxyRedirect) (*ProxyRedirect, error) {
	var out ProxyRedirect
	return &out, c.do(ctx, http.MethodPost, PathProxy, r, &out)
}

func (c *Client) ProxyRedirects(ctx context.Context) (*ProxyList, error) {
	var out ProxyList
	return &out, c.do(ctx, http.MethodGet, PathProxy, nil, &out)
}

// DeleteProxyRedirect removes the redirect of port named by key (its Key),
// or, with key "", the only redirect of port (refused, naming the
// candidates' keys, when several redirect port).
func (c *Client) DeleteProxyRedirect(ctx context.Context, port uint16, key string) error {
	p := fmt.Sprintf("%s/%d", PathProxy, port)
	if key != "" {
		p += "?key=" + url.QueryEscape(key)
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}
