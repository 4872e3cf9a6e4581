// Package calibrate measures this node's datapath choices: a short TCP
// throughput probe between two network namespaces (TCP), and the choice
// `auto` makes from a set of such measurements (Choose). The daemon builds
// the throwaway networks and endpoints the probes run on
// (internal/daemon/calibrate.go); nothing here leaves the namespaces it is
// given.
package calibrate
