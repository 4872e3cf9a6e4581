// Package hubble serves xlaned's flows through Hubble's gRPC API (the
// observer.Observer and peer.Peer services of github.com/cilium/cilium's
// api/v1), so that the stock `hubble` CLI and Hubble Relay read them.
//
// The contract:
//   - Feed (feed.go): one permanent subscription to the observability
//     feature's monitor (internal/observe), for the event types that make
//     flows (drop, fw, flow_new, nat, lb; never the per-packet verdicts).
//     Each event becomes a compact record in a bounded ring (ring.go:
//     Config.Flows records, oldest overwritten); nothing is added per
//     packet in the datapath, and the monitor's rate limit bounds what
//     the feed costs. Events the feed could not take in time are counted
//     by the monitor (its per-client dropped counter) and reported.
//   - Identity (identity.go) is resolved when a flow is read, not when it
//     is recorded: the addresses of a record are looked up in a cache of
//     the store's endpoints and networks (and, in Kubernetes mode, of the
//     pods the Kubernetes watch sees: Deps.Pods). An endpoint or pod that
//     goes away stays in the cache for Config.Keep, so recent flows keep
//     their names.
//   - Flows (flow.go) map xlane's event types, verdicts and drop reasons
//     onto Hubble's Flow: docs/observability.md lists the fields filled
//     and not.
//   - The server (server.go): GetFlows (filters, follow, since/until,
//     first/last), ServerStatus, GetNodes and Peer's Notify, on a unix
//     socket and optionally on TCP with TLS. A follower that reads too
//     slowly never holds the ring's writer: it skips what was overwritten
//     and is told how much with a LostEvent (HUBBLE_RING_BUFFER).
//   - Export (export.go): with Config.ExportPath, the flows the allow and
//     deny lists pass as JSON lines (GetFlowsResponse, as `hubble observe
//     -o json` and Cilium's exporter write them) to a file rotated by
//     size, or stdout; it follows the ring as a GetFlows follower does.
//   - The monitor's events (`xlane monitor`) get the same names: Start
//     gives the observability feature the cache's lookup
//     (observe.Observer.SetNamer).
//
// It reaches the daemon through core.Core (the store) and Deps; it never
// imports internal/daemon. cmd/xlaned makes it (Start) when --hubble is
// on and adds its status to `xlane status`.
package hubble
