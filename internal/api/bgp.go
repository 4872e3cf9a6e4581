package api

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// The BGP speaker's and the LoadBalancer pools' paths (docs/bgp.md).
const (
	// PathBGPPeers: POST a model.BGPPeer to add one, GET lists them,
	// DELETE PathBGPPeers/ADDR removes one.
	PathBGPPeers = "/v1/bgp/peers"
	// PathBGPStatus: GET the speaker's sessions and announcements.
	PathBGPStatus = "/v1/bgp/status"
	// PathLBPools: POST a model.LBPool, GET lists them, DELETE
	// PathLBPools/NAME removes one.
	PathLBPools = "/v1/lb-pools"
)

// BGPStatus is the speaker's view: its identity, its sessions and what it
// announces.
type BGPStatus struct {
	// Enabled: xlaned runs a speaker (--bgp-asn).
	Enabled  bool   `json:"enabled"`
	ASN      uint32 `json:"asn,omitempty"`
	RouterID string `json:"router_id,omitempty"`
	// Stop is what a stop of xlaned does to the routes: graceful (kept by
	// the peers for the restart time) or withdraw.
	Stop        string          `json:"stop,omitempty"`
	RestartTime int             `json:"restart_time,omitempty"`
	Peers       []BGPPeerStatus `json:"peers"`
	Announced   []BGPRoute      `json:"announced"`
	Learned     []BGPRoute      `json:"learned,omitempty"`
	// LastError is the last sync's error ("" when it applied).
	LastError string `json:"last_error,omitempty"`
}

// BGPPeerStatus is one session.
type BGPPeerStatus struct {
	model.BGPPeer
	// State is the BGP FSM state: idle, connect, active, opensent,
	// openconfirm, established.
	State string `json:"state"`
	// Up is when the session last came up (zero: never); Uptime the
	// seconds since, while established.
	Up     time.Time `json:"up,omitzero"`
	Uptime int64     `json:"uptime,omitempty"`
	// Sent, Received and Accepted count prefixes: announced to the peer,
	// received from it, and accepted (installed) of those.
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
	Accepted uint64 `json:"accepted"`
	// Flaps counts the session's drops; LastDown says why the last one
	// went down.
	Flaps    uint32 `json:"flaps,omitempty"`
	LastDown string `json:"last_down,omitempty"`
	// Local is this node's address on the established session: the next
	// hop the peer sees for its routes.
	Local string `json:"local,omitempty"`
	// GracefulRestart: both ends negotiated graceful restart, so the peer
	// keeps this node's routes while xlaned restarts.
	GracefulRestart bool `json:"graceful_restart"`
	// BFDState is the BFD session's state (up, down, init, admin-down)
	// of a peer added with --bfd.
	BFDState string `json:"bfd_state,omitempty"`
	// RetryAt: the session did not come up and its attempts are paused
	// until then (the backoff doubles from 5 s to 2 min; docs/bgp.md).
	RetryAt time.Time `json:"retry_at,omitzero"`
}

// BGPRoute is one announced or learned prefix.
type BGPRoute struct {
	Prefix  netip.Prefix `json:"prefix"`
	NextHop netip.Addr   `json:"next_hop,omitzero"`
	// Why says where an announced prefix comes from (pod-cidr, service
	// NAME in pool POOL, service-cidr); a learned one, which peer sent it.
	Why         string   `json:"why"`
	Communities []string `json:"communities,omitempty"`
	MED         uint32   `json:"med,omitempty"`
}

// AddBGPPeer adds a peer.
func (c *Client) AddBGPPeer(ctx context.Context, p model.BGPPeer) (*model.BGPPeer, error) {
	var out model.BGPPeer
	return &out, c.do(ctx, http.MethodPost, PathBGPPeers, p, &out)
}

// BGPPeers lists the configured peers.
func (c *Client) BGPPeers(ctx context.Context) ([]model.BGPPeer, error) {
	var out []model.BGPPeer
	return out, c.do(ctx, http.MethodGet, PathBGPPeers, nil, &out)
}

// RemoveBGPPeer removes a peer (its session ends with a Cease).
func (c *Client) RemoveBGPPeer(ctx context.Context, addr string) error {
	return c.do(ctx, http.MethodDelete, PathBGPPeers+"/"+url.PathEscape(addr), nil, nil)
}

// BGPStatus returns the speaker's status.
func (c *Client) BGPStatus(ctx context.Context) (*BGPStatus, error) {
	var out BGPStatus
	return &out, c.do(ctx, http.MethodGet, PathBGPStatus, nil, &out)
}

// CreateLBPool creates a LoadBalancer address pool.
func (c *Client) CreateLBPool(ctx context.Context, p model.LBPool) (*model.LBPool, error) {
	var out model.LBPool
	return &out, c.do(ctx, http.MethodPost, PathLBPools, p, &out)
}

// LBPools lists the pools with what each has handed out.
func (c *Client) LBPools(ctx context.Context) ([]LBPoolInfo, error) {
	var out []LBPoolInfo
	return out, c.do(ctx, http.MethodGet, PathLBPools, nil, &out)
}

// RemoveLBPool removes a pool.
func (c *Client) RemoveLBPool(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, PathLBPools+"/"+url.PathEscape(name), nil, nil)
}

// LBPoolInfo is a pool with its use: the service VIPs inside it.
type LBPoolInfo struct {
	model.LBPool
	// Size is how many addresses the pool has (capped at 2^32 for IPv6).
	Size uint64 `json:"size"`
	// Used lists the services whose VIP is in the pool.
	Used []LBPoolUse `json:"used"`
}

// LBPoolUse is one address of a pool in use.
type LBPoolUse struct {
	Addr    netip.Addr `json:"addr"`
	Service string     `json:"service"`
}
