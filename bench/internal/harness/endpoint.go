package harness

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// Endpoint is what the bench reads of `xlane -o json endpoint add`.
type Endpoint struct {
	ID      string       `json:"id"`
	IfName  string       `json:"ifname"`
	HostIf  string       `json:"host_ifname"`
	MAC     string       `json:"mac"`
	HostMAC string       `json:"host_mac"`
	IPs     []netip.Addr `json:"ips"`
	IPv4    netip.Addr   `json:"-"` // the first IPv4 address of IPs
}

// ParseEndpoint reads `xlane -o json endpoint add`; the endpoint must
// have an IPv4 address.
func ParseEndpoint(out string) (Endpoint, error) {
	var ep Endpoint
	if err := json.Unmarshal([]byte(out), &ep); err != nil {
		return ep, fmt.Errorf("endpoint add -o json: %w: %q", err, out)
	}
	for _, a := range ep.IPs {
		if a.Is4() {
			ep.IPv4 = a
			return ep, nil
		}
	}
	return ep, fmt.Errorf("endpoint add -o json: no IPv4 address in %q", out)
}
