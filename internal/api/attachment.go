package api

import (
	"context"
	"net/http"
	"net/url"
)

// PathAttachments are the CNI plugin's routes (xlane-cni): endpoints keyed
// by container ID and interface name, as the CNI spec keys attachments.
const PathAttachments = "/v1/attachments"

// AttachmentAdd is the body of POST /v1/attachments: attach a container's
// interface to an xlane network (CNI ADD).
type AttachmentAdd struct {
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
	// Netns is the container's network namespace path (CNI_NETNS).
	Netns string `json:"netns"`
	// CNINetwork is the CNI network's name (the conflist's): GC is
	// scoped to it.
	CNINetwork string `json:"cni_network"`
	// Network is the xlane network to join.
	Network string `json:"network"`
	// Create, when set, creates Network if it does not exist (its Name is
	// ignored); its Mode and Device, when set, must also match an existing
	// network's (what it asked for or what it runs).
	Create *NetworkCreate `json:"create,omitempty"`
	// IPs asked for (one per subnet at most); empty: from the pool.
	IPs []string `json:"ips,omitempty"`
	// MAC of the container's interface; empty: a random one.
	MAC string `json:"mac,omitempty"`
	// Ports to publish on the node's addresses, [HOSTIP:]NODEPORT:PORT[/tcp|udp]
	// (the CNI portMappings capability; BPF modes).
	Ports []string `json:"ports,omitempty"`
}

// AttachmentKey is the CNI spec's attachment key.
type AttachmentKey struct {
	ContainerID string `json:"container_id"`
	IfName      string `json:"ifname"`
}

// AttachmentGC is the body of POST /v1/attachments/gc (CNI GC): every
// attachment of CNINetwork not in Valid is removed, with all it holds.
type AttachmentGC struct {
	CNINetwork string          `json:"cni_network"`
	Valid      []AttachmentKey `json:"valid"`
}

// AttachmentGCResult says what a GC removed.
type AttachmentGCResult struct {
	// Removed are the endpoint IDs of the attachments removed (their
	// devices, addresses, datapath entries, flows, pins and records).
	Removed []string `json:"removed"`
	// Leases released that no endpoint held (left by a crash).
	Leases int `json:"leases"`
}

// AttachmentStatus is the body of GET /v1/attachments/status?network=NAME
// (CNI STATUS): whether an ADD to the network can succeed now.
type AttachmentStatus struct {
	Network string `json:"network"`
	// Ready: ADD would succeed. Otherwise Reason says why, and Exhausted
	// whether it is for want of addresses (the spec's error 51, else 50).
	Ready     bool   `json:"ready"`
	Exhausted bool   `json:"exhausted,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Missing: the network does not exist; PodCIDRs: one created without
	// subnets would take this node's pod CIDRs (a node of a cluster).
	Missing  bool `json:"missing,omitempty"`
	PodCIDRs bool `json:"pod_cidrs,omitempty"`
}

// AddAttachment attaches a container's interface (CNI ADD). An ADD
// repeated for the same key and netns returns the attachment it made.
func (c *Client) AddAttachment(ctx context.Context, req AttachmentAdd) (*EndpointInfo, error) {
	var out EndpointInfo
	return &out, c.do(ctx, http.MethodPost, PathAttachments, req, &out)
}

// Attachment returns the endpoint of an attachment, or an error that is
// model.ErrNotFound.
func (c *Client) Attachment(ctx context.Context, containerID, ifname string) (*EndpointInfo, error) {
	var out EndpointInfo
	return &out, c.do(ctx, http.MethodGet, attachmentPath(containerID, ifname), nil, &out)
}

// RemoveAttachment removes an attachment (CNI DEL); a missing one is not an
// error.
func (c *Client) RemoveAttachment(ctx context.Context, containerID, ifname string) error {
	return c.do(ctx, http.MethodDelete, attachmentPath(containerID, ifname), nil, nil)
}

// GCAttachments removes the attachments of a CNI network that are not
// valid (CNI GC).
func (c *Client) GCAttachments(ctx context.Context, req AttachmentGC) (*AttachmentGCResult, error) {
	var out AttachmentGCResult
	return &out, c.do(ctx, http.MethodPost, PathAttachments+"/gc", req, &out)
}

// AttachmentStatus says whether an ADD to network can succeed (CNI STATUS).
func (c *Client) AttachmentStatus(ctx context.Context, network string) (*AttachmentStatus, error) {
	var out AttachmentStatus
	return &out, c.do(ctx, http.MethodGet, PathAttachments+"/status?network="+url.QueryEscape(network), nil, &out)
}

func attachmentPath(containerID, ifname string) string {
	return PathAttachments + "/" + url.PathEscape(containerID) + "/" + url.PathEscape(ifname)
}
