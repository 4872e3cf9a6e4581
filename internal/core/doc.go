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
//	cmd/xlaned            wires: daemon.New → the core, which makes each
//	                      feature with core.Core
//	internal/core         this contract (no feature imports)
//	internal/daemon       the core's implementation — lock, store
//	                      transaction, the validate/apply/rollback runner,
//	                      reconcile, networks, endpoints, CNI attachments,
//	                      status — and, until they move, the features not
//	                      yet in packages of their own (see below)
//	internal/vm           VM endpoints: taps, DHCP/RA, QEMU probe   (moved)
//	internal/calibration  what auto means on this node: the test bed,
//	                      the probes, the stored choice              (moved)
//	internal/observe      monitor, trace, flows, dumps, metrics'
//	                      snapshot, status health                   (moved)
//	internal/core/coretest  a core.Core for feature packages' tests
//	internal/cluster      nodes, peers, probes, overlay MTU,
//	                      the neighbour mirror                       (moved)
//	internal/accelproxy   socket acceleration and proxy redirects   (moved)
//	internal/firewall/control  the firewall's control: rule sets →
//	                      tables, DDoS, blocklist                    (moved)
//	internal/services     services: VIPs, backends, Maglev          (moved)
//
// A feature package holds its own validation, store buckets and datapath
// role, and is called by the core at fixed points of an object's life:
// validate (inside the store transaction, before anything is applied),
// apply (after the core's own kernel work, under the same rollback),
// remove, inspect and status. A CNI ADD therefore reads as one chain:
//
//	server → daemon.AddAttachment → attachmentNetwork (a missing
//	    network: CreateNetwork → store.Update{validateNetwork
//	    (+ each NetworkValidator at CheckName, CheckDefaults,
//	    CheckShape: calibration, cluster) → netconf.EnsureNetwork,
//	    EnsureGuard, the VNI})
//	→ addEndpoint → store.Update{
//	    validateEndpoint (+ vm.Validate, + calibration.Reserved)
//	    ipam.Allocate → applyEndpoint → programEndpoint (+ vm.AttachPort)
//	    (+ vm.Serve) } — rolled back by unapplyEndpoint on any error,
//	with Faults.At("veth-created" | "container-configured" |
//	"datapath-programmed") between the steps.
//
// A feature checks a network being created through one hook,
// NetworkValidator (validate.go), which the core calls at each of the
// validation's fixed points (NetworkCheck: the name, before the subnets
// are parsed, once subnets, gateways and VLAN are known); the daemon
// registers the features' validators in wireFeatures (calibration:
// reserved names; cluster: default subnets, the MTU). An endpoint's checks
// are still called directly (vm.Validate inside the request kind's
// switch, calibration.Reserved as "no such network").
//
// What is still inside internal/daemon is named in its doc.go; the features
// there call the core's methods directly until they move out and take
// core.Core instead.
package core
