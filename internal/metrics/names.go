package metrics

// Every metric xlaned exports, with its labels and help: the one place
// they are named (docs/observability.md lists the same; a test compares).
// Names follow Hubble's where the concept is the same (drop_total,
// flows_processed_total) and Cilium's bpf_map_pressure, with the xlane_
// prefix; counters end in _total.

// Label names.
const (
	LabelEndpoint  = "endpoint"   // endpoint ID ("" for the uplink and the node)
	LabelNetwork   = "network"    // network name ("" for the uplink and the node)
	LabelDirection = "direction"  // from_endpoint (sent by it) or to_endpoint
	LabelHook      = "hook"       // the attach point whose program decided: tc, xdp, netkit, sock
	LabelDevice    = "device"     // the device the count was taken on: endpoint, uplink, node
	LabelReason    = "reason"     // enum xl_reason as in bpf/lib/abi.h: fwd_peer, drop_fw, ...
	LabelVerdict   = "verdict"    // forwarded, passed (to Linux) or dropped
	LabelMap       = "map"        // BPF map name: xlane_ct, ...
	LabelRule      = "rule"       // firewall rule name (default:SCOPE:DIR for default policies)
	LabelAction    = "action"     // firewall action: allow, drop, reject, log
	LabelService   = "service"    // service name
	LabelBackend   = "backend"    // backend ADDR:PORT
	LabelState     = "state"      // backend state: active or draining; a WireGuard peer's: pending, dropped, cleartext
	LabelProgram   = "program"    // BPF program name: xlane_from_endpoint, ...
	LabelSource    = "source"     // what a scrape failed to read
	LabelVersion   = "version"    // git describe of the build (internal/version)
	LabelCommit    = "commit"     // the git commit it was built from
	LabelBuildDate = "build_date" // when it was built (RFC 3339)
	LabelGoVersion = "goversion"
	LabelMethod    = "method"
	LabelRoute     = "route"  // the API route pattern: GET /v1/endpoints/{id}
	LabelCode      = "code"   // HTTP status code
	LabelEvent     = "event"  // what a socket-layer counter counts: added, redirected, fallback_no_peer, ... (accel.go, proxy.go)
	LabelResult    = "result" // found or missed
	LabelKind      = "kind"   // what the start could not apply: network, endpoint, node (a peer), this node
	LabelNode      = "node"   // a peer node's name (encryption between nodes)
	LabelPeer      = "peer"   // a BGP peer's address (docs/bgp.md)
)

// Type is a Prometheus metric type.
type Type string

const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Summary   Type = "summary"
	Histogram Type = "histogram"
)

// Metric names one metric.
type Metric struct {
	Name   string
	Type   Type
	Labels []string
	Help   string
}

var flowLabels = []string{LabelVerdict, LabelReason, LabelDirection, LabelHook, LabelDevice, LabelEndpoint, LabelNetwork}
var dropLabels = []string{LabelReason, LabelDirection, LabelHook, LabelDevice, LabelEndpoint, LabelNetwork}
var endpointLabels = []string{LabelEndpoint, LabelNetwork, LabelDirection}

var (
	// The datapath's per-reason counters (xlane_metrics).
	FlowsProcessed = Metric{"xlane_flows_processed_total", Counter, flowLabels,
		"Packets the datapath programs handled, by verdict and the reason they were counted under (every packet once)."}
	FlowsProcessedBytes = Metric{"xlane_flows_processed_bytes_total", Counter, flowLabels,
		"Bytes (whole frames) of the packets in xlane_flows_processed_total."}
	Drop = Metric{"xlane_drop_total", Counter, dropLabels,
		"Packets the datapath dropped, by reason."}
	DropBytes = Metric{"xlane_drop_bytes_total", Counter, dropLabels,
		"Bytes (whole frames) of the packets in xlane_drop_total."}
	EndpointPackets = Metric{"xlane_endpoint_packets_total", Counter, endpointLabels,
		"Packets an endpoint sent (from_endpoint) or was given (to_endpoint) that the datapath counted, every reason."}
	EndpointBytes = Metric{"xlane_endpoint_bytes_total", Counter, endpointLabels,
		"Bytes (whole frames) of the packets in xlane_endpoint_packets_total."}

	// Conntrack (xlane_ct) and its garbage collection.
	CTEntries = Metric{"xlane_ct_entries", Gauge, nil,
		"Conntrack entries (two per flow, one per direction)."}
	CTMaxEntries = Metric{"xlane_ct_max_entries", Gauge, nil,
		"Size of the conntrack table (--ct-size)."}
	CTFillRatio = Metric{"xlane_ct_fill_ratio", Gauge, nil,
		"Conntrack entries over the table's size; new flows go untracked (pass_ct_full) at 1."}
	CTExpired = Metric{"xlane_ct_expired_entries", Gauge, nil,
		"Conntrack entries past their deadline that the GC has not collected yet."}
	CTGCRuns = Metric{"xlane_ct_gc_runs_total", Counter, nil,
		"Conntrack garbage collection passes."}
	CTGCDeleted = Metric{"xlane_ct_gc_deleted_total", Counter, nil,
		"Conntrack entries the garbage collection deleted."}
	CTGCDuration = Metric{"xlane_ct_gc_duration_seconds", Summary, nil,
		"Time the conntrack garbage collection passes took."}
	CTGCLastRun = Metric{"xlane_ct_gc_last_run_timestamp_seconds", Gauge, nil,
		"When the last conntrack garbage collection pass ended (Unix time; 0: none yet)."}

	// Map pressure.
	MapEntries = Metric{"xlane_bpf_map_entries", Gauge, []string{LabelMap},
		"Entries in a BPF map that can fill up (hashes, LRU hashes, LPM tries, hash of maps, devmap hash)."}
	MapMaxEntries = Metric{"xlane_bpf_map_max_entries", Gauge, []string{LabelMap},
		"A BPF map's max_entries."}
	MapPressure = Metric{"xlane_bpf_map_pressure", Gauge, []string{LabelMap},
		"A BPF map's entries over its max_entries (Cilium's bpf_map_pressure)."}

	// Firewall.
	FirewallRuleHits = Metric{"xlane_firewall_rule_hits_total", Counter, []string{LabelRule, LabelAction},
		"Packets that matched a firewall rule (the rule that decided, and log rules)."}
	FirewallRuleBytes = Metric{"xlane_firewall_rule_bytes_total", Counter, []string{LabelRule, LabelAction},
		"Bytes of the packets in xlane_firewall_rule_hits_total."}

	// Services.
	ServiceBackends = Metric{"xlane_service_backends", Gauge, []string{LabelService, LabelState},
		"Backends of a service: active, or draining (weight 0)."}
	ServiceBackendFlows = Metric{"xlane_service_backend_flows", Gauge, []string{LabelService, LabelBackend},
		"Tracked flows to a service that its Maglev selection sent to a backend and that still live in conntrack."}

	// BPF run statistics (kernel.bpf_stats_enabled or xlaned --bpf-stats).
	ProgramRuns = Metric{"xlane_bpf_program_runs_total", Counter, []string{LabelProgram},
		"Runs of a loaded xlane program while BPF run statistics were on."}
	ProgramRunTime = Metric{"xlane_bpf_program_run_seconds_total", Counter, []string{LabelProgram},
		"Time a loaded xlane program ran while BPF run statistics were on."}
	BPFStatsEnabled = Metric{"xlane_bpf_stats_enabled", Gauge, nil,
		"1 while the kernel counts BPF run time (xlaned --bpf-stats or kernel.bpf_stats_enabled=1), else 0."}

	// The neighbour mirror of the XDP datapath.
	NeighEvents = Metric{"xlane_neigh_events_total", Counter, nil,
		"Neighbour events applied to xlane_neigh."}
	NeighResyncs = Metric{"xlane_neigh_resyncs_total", Counter, nil,
		"Full resyncs of xlane_neigh after a lost neighbour event."}

	// The socket layer (docs/accel.md).
	AccelOn = Metric{"xlane_accel_on", Gauge, nil,
		"1 while socket acceleration is attached and on, else 0."}
	// Counters by unit (sockets, messages, bytes, directions, connections,
	// lookups, listeners: one metric each, Prometheus' naming); accel.go and proxy.go
	// map the BPF counters (enum accel_stat, enum proxy_stat) to them.
	AccelMapSockets = Metric{"xlane_accel_map_sockets", Gauge, nil,
		"Sockets in the acceleration socket map (both ends of each accelerated connection)."}
	AccelSockets = Metric{"xlane_accel_sockets_total", Counter, []string{LabelEvent},
		"Sockets socket acceleration saw established: added to the map, or skipped (skip_filter, skip_inflight, skip_off) or add_failed."}
	AccelMessages = Metric{"xlane_accel_messages_total", Counter, []string{LabelEvent},
		"Messages (sendmsg calls) of accelerated sockets: redirected socket to socket, or fallback_REASON (no_peer, sticky, off, no_state, mem_pressure) through TCP."}
	AccelBytes = Metric{"xlane_accel_bytes_total", Counter, []string{LabelEvent},
		"Bytes of the messages in xlane_accel_messages_total: redirected, or fallback (every reason)."}
	AccelDirections = Metric{"xlane_accel_fallback_directions_total", Counter, []string{LabelReason},
		"Directions of accelerated connections that stopped redirecting: backlog (the peer had more than max_backlog unread) or small_stream."}
	ProxyConnections = Metric{"xlane_proxy_connections_total", Counter, []string{LabelDirection, LabelEvent},
		"Connections the transparent redirect saw: out (connect) redirected, exempted, track_failed; in (arriving) redirected, exempted, no_listener."}
	ProxyOrigDst = Metric{"xlane_proxy_origdst_lookups_total", Counter, []string{LabelResult},
		"getsockopt(SO_ORIGINAL_DST) calls of the proxy: found (answered) or missed (an unknown connection)."}
	ProxyListeners = Metric{"xlane_proxy_listeners_added_total", Counter, nil,
		"Proxy listen() calls put into xlane_proxy_listeners for inbound redirects."}

	// Encryption between nodes (docs/encryption.md), per peer.
	WireGuardBytes = Metric{"xlane_wireguard_peer_bytes_total", Counter, []string{LabelNode, LabelDirection},
		"Bytes the WireGuard device exchanged with a peer node: rx (received, decrypted) or tx (sent, encrypted); they restart from 0 with the embedded engine's device."}
	WireGuardHandshakeAge = Metric{"xlane_wireguard_peer_handshake_age_seconds", Gauge, []string{LabelNode},
		"Seconds since the last WireGuard handshake with a peer node (no series before the first)."}
	WireGuardEncrypted = Metric{"xlane_wireguard_peer_encrypted", Gauge, []string{LabelNode},
		"1 when a peer node has a WireGuard session (a handshake under 180 s old), else 0: xlane status says why."}
	WireGuardUnencrypted = Metric{"xlane_wireguard_peer_unencrypted", Gauge, []string{LabelNode, LabelReason, LabelState},
		"1 for a peer node without a working WireGuard session: reason no_handshake, session_expired or not_on_device; state pending (its first handshake's grace: the traffic waits in WireGuard), dropped (--encryption-strict: drop_unencrypted) or cleartext (the traffic falls back to the overlay unencrypted)."}

	// The BGP speaker (docs/bgp.md), per peer of `xlane bgp peer add`.
	BGPSessionEstablished = Metric{"xlane_bgp_session_established", Gauge, []string{LabelPeer},
		"1 while the BGP session with a peer is established, else 0 (xlane bgp status says the state and why it last went down)."}
	BGPSessionUptime = Metric{"xlane_bgp_session_uptime_seconds", Gauge, []string{LabelPeer},
		"Seconds since the BGP session with a peer came up (0 while it is down)."}
	BGPSessionFlaps = Metric{"xlane_bgp_session_flaps_total", Counter, []string{LabelPeer},
		"Times the BGP session with a peer went down after being established (since xlaned started)."}
	BGPPrefixesSent = Metric{"xlane_bgp_prefixes_sent", Gauge, []string{LabelPeer},
		"Prefixes announced to a BGP peer now."}
	BGPPrefixesReceived = Metric{"xlane_bgp_prefixes_received", Gauge, []string{LabelPeer},
		"Prefixes a BGP peer announces to this node now (accepted or not)."}
	BGPPrefixesAccepted = Metric{"xlane_bgp_prefixes_accepted", Gauge, []string{LabelPeer},
		"Prefixes of xlane_bgp_prefixes_received the speaker accepted."}
	BGPAnnounced = Metric{"xlane_bgp_announced_routes", Gauge, nil,
		"Prefixes the BGP speaker announces (pod CIDRs, LoadBalancer addresses, service CIDRs)."}

	// The daemon.
	APIRequestDuration = Metric{"xlane_api_request_duration_seconds", Histogram, []string{LabelMethod, LabelRoute, LabelCode},
		"Time the daemon took to answer API requests."}
	Unapplied = Metric{"xlane_unapplied_objects", Gauge, []string{LabelKind},
		"Networks, endpoints, peer nodes and node-wide steps the daemon could not fully apply at its last start (it runs on; xlane status' health lists them)."}
	ScrapeErrors = Metric{"xlane_scrape_errors_total", Counter, []string{LabelSource},
		"Scrapes that could not read part of the state (its series are missing from that scrape)."}
	BuildInfo = Metric{"xlane_build_info", Gauge, []string{LabelVersion, LabelCommit, LabelBuildDate, LabelGoVersion},
		"Always 1; the version, commit and build date of xlaned (xlaned --version)."}
)

// All lists every xlane_ metric; the Go runtime's go_* and the process'
// process_* come from client_golang's collectors besides.
var All = []Metric{
	FlowsProcessed, FlowsProcessedBytes, Drop, DropBytes, EndpointPackets, EndpointBytes,
	CTEntries, CTMaxEntries, CTFillRatio, CTExpired, CTGCRuns, CTGCDeleted, CTGCDuration, CTGCLastRun,
	MapEntries, MapMaxEntries, MapPressure,
	FirewallRuleHits, FirewallRuleBytes,
	ServiceBackends, ServiceBackendFlows,
	ProgramRuns, ProgramRunTime, BPFStatsEnabled,
	NeighEvents, NeighResyncs,
	AccelOn, AccelMapSockets, AccelSockets, AccelMessages, AccelBytes, AccelDirections,
	ProxyConnections, ProxyOrigDst, ProxyListeners,
	WireGuardBytes, WireGuardHandshakeAge, WireGuardEncrypted, WireGuardUnencrypted,
	BGPSessionEstablished, BGPSessionUptime, BGPSessionFlaps, BGPPrefixesSent, BGPPrefixesReceived, BGPPrefixesAccepted, BGPAnnounced,
	APIRequestDuration, Unapplied, ScrapeErrors, BuildInfo,
}
