// Package ipam hands out endpoint addresses from a network's subnets. Leases
// live in the store, inside the caller's transaction, so an address is
// never handed out twice, even across daemon restarts, and a failed endpoint
// add releases its addresses with the rest of the rollback.
package ipam
