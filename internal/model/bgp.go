package model

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BGPPeer is one router xlaned's BGP speaker (internal/bgp) keeps a session
// with. The session carries the address family of the peer's address
// (IPv4 unicast over an IPv4 session, IPv6 unicast over an IPv6 one): the
// next hop a route needs is the session's local address of that family.
type BGPPeer struct {
	Address netip.Addr `json:"address"`
	ASN     uint32     `json:"asn"`
	// Port is the peer's TCP port (0: 179).
	Port uint16 `json:"port,omitempty"`
	// Password is the TCP MD5 signature key (RFC 2385), "" for none.
	Password string `json:"password,omitempty"`
	// Multihop is the TTL of an eBGP session to a peer more than one hop
	// away (0: directly connected, TTL 1).
	Multihop uint8 `json:"multihop,omitempty"`
	// BFD runs a BFD session (1 s x 3) beside the BGP one while it is
	// up: a lost peer is detected in about 3 s instead of after the hold
	// time (internal/bgp/bfd.go).
	BFD bool `json:"bfd,omitempty"`
	// HoldTime is the BGP hold time in seconds (0: 90; else 3-65535); the
	// keepalive interval is a third of it.
	HoldTime int `json:"hold_time,omitempty"`
	// Source is where the peer comes from: "" the CLI/API,
	// "node-annotation" Kubernetes mode's Node annotation
	// xlane.dev/bgp-peers (internal/bgp/kube.go), which alone changes it.
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created"`
}

// Validate checks a peer; errors name the field.
func (p *BGPPeer) Validate() error {
	switch a := p.Address; {
	case !a.IsValid():
		return Fieldf("address", "missing: want the peer's IPv4 or IPv6 address")
	case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
		return Fieldf("address", "%s: not a router's unicast address", a)
	case a.Zone() != "":
		return Fieldf("address", "%s: a zone (link-local peering) is not supported", a)
	}
	if err := CheckASN("asn", p.ASN); err != nil {
		return err
	}
	if len(p.Password) > 80 {
		return Fieldf("password", "%d characters: TCP MD5 keys are at most 80", len(p.Password))
	}
	if p.HoldTime != 0 && (p.HoldTime < 3 || p.HoldTime > 65535) {
		return Fieldf("hold_time", "%d: want 3-65535 seconds (0: 90)", p.HoldTime)
	}
	return nil
}

// CheckASN validates an AS number: 1-4294967294 (0 and 65535 and
// 4294967295 are reserved, RFC 7300, RFC 7607), field names it.
func CheckASN(field string, asn uint32) error {
	switch asn {
	case 0, 23456, 65535, 4294967295:
		return Fieldf(field, "%d: reserved AS number (want 1-4294967294, not 23456 or 65535)", asn)
	}
	return nil
}

// LBPool is a range of LoadBalancer addresses. Kubernetes mode hands
// addresses of its pools to Services of type LoadBalancer
// (status.loadBalancer.ingress, internal/lbipam); the BGP speaker
// announces every service VIP inside a pool, as a host route, from the
// nodes that can serve it.
type LBPool struct {
	Name  string         `json:"name"`
	CIDRs []netip.Prefix `json:"cidrs"`
	// Communities are attached to this pool's announcements (AS:VALUE,
	// or a well-known name: no-export, no-advertise).
	Communities []string `json:"communities,omitempty"`
	// MED is the multi-exit discriminator of its announcements (0: none).
	MED     uint32    `json:"med,omitempty"`
	Created time.Time `json:"created"`
}

// Validate checks a pool against itself (the name is the caller's naming
// rule; overlaps with other pools are the caller's too).
func (p *LBPool) Validate() error {
	if len(p.CIDRs) == 0 {
		return Fieldf("cidrs", "missing: want at least one prefix (--cidr)")
	}
	for i, c := range p.CIDRs {
		if !c.IsValid() {
			return Fieldf("cidrs", "%q: not a prefix", c)
		}
		if c != c.Masked() {
			return Fieldf("cidrs", "%s: host bits set (want %s)", c, c.Masked())
		}
		if c.Addr().Is4() && c.Bits() < 8 || c.Addr().Is6() && c.Bits() < 64 {
			return Fieldf("cidrs", "%s: too large (IPv4 /8 or longer, IPv6 /64 or longer)", c)
		}
		if p := VIPAddrProblem(c.Addr()); p != "" {
			return Fieldf("cidrs", "%s: %s", c, p)
		}
		for _, o := range p.CIDRs[:i] {
			if o.Overlaps(c) {
				return Fieldf("cidrs", "%s overlaps %s", c, o)
			}
		}
	}
	for _, c := range p.Communities {
		if _, err := ParseCommunity(c); err != nil {
			return Fieldf("communities", "%q: %s", c, err)
		}
	}
	return nil
}

// Contains reports whether a is inside one of the pool's prefixes.
func (p *LBPool) Contains(a netip.Addr) bool {
	return slices.ContainsFunc(p.CIDRs, func(c netip.Prefix) bool { return c.Contains(a.Unmap()) })
}

var communityRE = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)

// ParseCommunity reads a standard BGP community: AS:VALUE (each 0-65535)
// or no-export, no-advertise, no-export-subconfed, blackhole.
func ParseCommunity(s string) (uint32, error) {
	switch strings.ToLower(s) {
	case "no-export":
		return 0xFFFFFF01, nil
	case "no-advertise":
		return 0xFFFFFF02, nil
	case "no-export-subconfed":
		return 0xFFFFFF03, nil
	case "blackhole":
		return 0xFFFF029A, nil
	}
	m := communityRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("want AS:VALUE or no-export, no-advertise, no-export-subconfed, blackhole")
	}
	hi, err1 := strconv.ParseUint(m[1], 10, 16)
	lo, err2 := strconv.ParseUint(m[2], 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("AS and VALUE are 0-65535 each")
	}
	return uint32(hi)<<16 | uint32(lo), nil
}
