// Package fqdn is FQDN egress: firewall rules with dst_names (and
// ClusterNetworkPolicy's domainNames peers, which translate to them) allow
// an endpoint to reach the addresses it resolved through DNS for those
// names, for as long as the answer's TTL says, bounded by MinTTL and
// MaxTTL.
//
// How answers are seen: by parsing, off the critical path. For every
// local endpoint in a network namespace, while the rule set has rules
// with names, a packet socket in the endpoint's namespace, bound to its
// interface (not loopback), with a classic BPF filter for UDP port 53,
// receives a copy of the endpoint's DNS queries and answers as the
// endpoint sends and receives them. The datapath never waits for xlaned:
// the endpoint's DNS works whether xlaned runs or not (no proxy to fail
// open); what xlaned does not see while it is down is a name whose
// addresses are not allowed until the endpoint asks again. An answer
// counts only when it matches a query the endpoint sent (transaction id,
// the endpoint's port, the question) and comes from the address that query
// went to: xlane's datapath keeps every endpoint to its own source
// addresses (drop_spoofed), so another endpoint cannot forge one; a
// DNS server an endpoint may reach is trusted (policies keep endpoints to
// the cluster's DNS).
//
// What it writes: xlane_fw_resolved (bpf/lib/fw_maps.h) holds, per rule
// (its counter slot), endpoint address and resolved address, the
// CLOCK_MONOTONIC time its TTL ends; the firewall's search (fw_resolved in
// bpf/lib/fw_classify.h) lets a rule with names match only such a
// destination before that time. Conntrack passes established flows before
// any rule, so the end of a TTL stops new connections, not the ones open.
// Answers are kept per endpoint for their TTL, so a rule added later
// allows what an endpoint resolved before it.
//
// The race: the endpoint may connect before the entry is written. Each
// tap is read on a thread of its own at nice -20, and the tap captures
// the endpoint's TCP SYNs too: one sent (kernel timestamp) before its
// destination's entry was written is replayed out of the endpoint's device
// once the entry is in, instead of waiting for the client's retransmission
// a second later.
//
// Names follow ClusterNetworkPolicy's DomainName: an exact name, or
// "*." and a name, which matches every name below it (one label or
// more), not the name itself; case-insensitive, a trailing dot ignored.
package fqdn
