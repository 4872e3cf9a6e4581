// Package store is xlane's state: networks, endpoints and address leases in
// one bbolt file. It is the source of truth; the daemon rebuilds the kernel
// state from it. A file is opened by one daemon at a time (bbolt's flock):
// a second daemon on the same file fails fast with a clear error.
//
// All reads and writes go through View/Update transactions, so a change
// that spans records (an endpoint and its leases) commits whole or not at all.
package store
