// Package calibrate measures this node's datapath choices: a short TCP
// throughput probe between two network namespaces (TCP), and the ranking
// `auto` takes from a set of such measurements (Choose, ChooseBigTCP: the
// default is left only on a margin that repeats, as Rule states). The daemon builds
// the throwaway networks and endpoints the probes run on
// (internal/calibration); nothing here leaves the namespaces it is
// given.
package calibrate
