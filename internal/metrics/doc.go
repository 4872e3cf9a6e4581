// Package metrics is xlaned's Prometheus endpoint (--metrics-addr): a
// collector that reads the datapath's BPF maps when Prometheus scrapes
// (nothing is counted per packet beyond what the programs count anyway),
// the daemon API's request latency, and the Go runtime.
//
// names.go is the one list of metric names, labels and help texts;
// docs/observability.md lists the same (a test compares them). The
// collector (collector.go) turns a Snapshot, which the daemon builds from
// the maps and its store at scrape time, into samples: a removed
// endpoint's series disappear with it, so cardinality follows what
// exists. serve.go opens the listener (loopback or a unix socket unless
// told otherwise) and instruments the API.
package metrics
