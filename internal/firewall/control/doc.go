// Package control is the firewall feature of xlaned: the rule set in the
// store, compiled (internal/firewall) and installed into the datapath's
// classifier atomically, then recorded, all or nothing (Firewall: Apply,
// Add, Update, Remove, ApplyOwned for Kubernetes mode's NetworkPolicies);
// the uplink's DDoS settings and prefix blocklist, which may not cut the
// node off (blockguard.go); the rules' counters and last hits (List,
// lasthit.go, RuleSpec for the metrics) and the sampled hits it logs.
// It follows the networks and endpoints its scopes name and recompiles
// when they change.
//
// It reaches the rest of the daemon only through core.Core (the lock, the
// store, the datapath's firewall maps, fault points, the reason counters)
// and never touches a map value itself: the encoding is
// internal/firewall's (Installer), the only firewall package that imports
// internal/bpf. internal/xlaned makes it (New) with the other features; the core
// starts it (Start) after its reconcile, before the API serves.
package control
