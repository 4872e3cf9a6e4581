// Package core is the contract between xlaned's core and its feature
// packages: what a feature gets from the core (Core: the one lock, the
// store, the datapath, the kernel's features, fault points, the network and
// endpoint operations), the runner's fault points (Faults) and the naming
// rules every object shares (NameRE, Hidden). It imports no feature package
// (rules_test.go fails the build's tests if it does), so every feature can
// import it without closing a circle.
//
// # The layout this package is the centre of (issue 27)
//
//	cmd/xlaned            flags, the API; runs internal/xlaned
//	internal/xlaned       the wiring: daemon.Open → each feature made
//	                      with d.Core() → d.Register → d.Start
//	internal/core         this contract (no feature imports)
//	internal/daemon       the core's implementation — lock, store
//	                      transaction, the validate/apply/rollback runner,
//	                      reconcile, networks, endpoints, CNI attachments,
//	                      status; the features it calls (daemon.Features)
//	internal/core/coretest  a core.Core for feature packages' tests
//	internal/vm           VM endpoints: taps, DHCP/RA, QEMU probe
//	internal/calibration  what auto means on this node: the test bed,
//	                      the probes, the stored choice
//	internal/observe      monitor, trace, flows, dumps, metrics'
//	                      snapshot, status health
//	internal/cluster      nodes, peers, probes, overlay MTU,
//	                      the neighbour mirror
//	internal/accelproxy   socket acceleration and proxy redirects
//	internal/firewall/control  the firewall's control: rule sets →
//	                      tables, DDoS, blocklist
//	internal/services     services: VIPs, backends, Maglev
//	internal/hubble, internal/bgp, internal/lbipam  features the core
//	                      does not call: cmd/xlaned makes them once the
//	                      daemon has started
//
// A feature package holds its own validation, store buckets and datapath
// role, and is called by the core at fixed points of an object's life:
// validate (inside the store transaction, before anything is applied),
// apply (after the core's own kernel work, under the same rollback),
// remove, inspect and status. A CNI ADD therefore reads as one chain
// through the core plus one validator per feature:
//
//	server → daemon.AddAttachment → attachmentNetwork (a missing
//	    network: CreateNetwork → store.Update{validateNetwork
//	    (+ each NetworkValidator at CheckName, CheckDefaults,
//	    CheckShape: calibration, cluster) → netconf.EnsureNetwork,
//	    EnsureGuard, the VNI})
//	→ addEndpoint → store.Update{
//	    validateEndpoint (+ each EndpointValidator: calibration,
//	    vm) → ipam.Allocate → applyEndpoint → programEndpoint
//	    (+ vm.AttachPort) (+ vm.Serve) } — rolled back by
//	    unapplyEndpoint on any error, with Faults.At("veth-created" |
//	    "container-configured" | "datapath-programmed") between the
//	    steps
//	→ PublishPorts (the ADD's port mappings; RemoveEndpoint on error).
//
// A feature checks what is being created through one hook per object
// (validate.go): NetworkValidator, which the core calls at each of a
// network's validation's fixed points (NetworkCheck: the name, before the
// subnets are parsed, once subnets, gateways and VLAN are known), and
// EndpointValidator, which it calls once its own checks of an endpoint
// have passed. A feature has them called by implementing them: the daemon
// finds them among the features cmd/xlaned registers (calibration:
// reserved names; cluster: default subnets, the MTU; vm: the VM fields,
// the tap, the network's mode).
package core
