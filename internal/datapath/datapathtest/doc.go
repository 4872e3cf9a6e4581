// Package datapathtest has a fake datapath.Datapath: plain Go maps in place
// of the BPF maps and links, so the daemon's apply, rollback and reconcile
// logic is testable without root, BPF or a kernel. Fail makes any change
// fail, before or after it is made (a partial write), to drive rollbacks.
// What the fake does not model (observability, the firewall's maps,
// conntrack collection) is datapath.Unavailable's, which it embeds: a new
// datapath operation needs a fake only when a test needs one.
package datapathtest
