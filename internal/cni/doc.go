// Package cni is xlane-cni, the CNI plugin (spec 1.1.0 and every older
// version version.All lists): a thin client of the local xlaned. ADD, DEL,
// CHECK, GC and STATUS each decode the network configuration, make one or
// two API calls (internal/api, the attachment routes) and encode the result
// or a spec error; VERSION is skel's. The daemon owns every kernel object
// and the addresses; the plugin only reads the container's namespace to
// report (ADD) and verify (CHECK) what is there.
//
// Files: conf.go (the configuration and its validation), plugin.go (the
// commands), result.go (results: the container's interface, addresses
// and routes, merged into a previous plugin's result when chained),
// errors.go (API errors to the spec's error codes, naming the field).
// docs/kubernetes.md is the user's reference.
package cni
