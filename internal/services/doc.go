// Package services is the services feature of xlaned: a service is a VIP
// (address, port, protocol) with weighted backends, programmed into the
// datapath's service maps (one Maglev table each, internal/maglev). It
// owns the services' validation (names, VIPs that would take the node's
// broadcasts: vip.go), their store records and the datapath's services
// role, and offers the one typed path from the edges to the datapath:
//
//	the API (internal/server: text → model.Service at the edge)  ┐
//	Kubernetes (internal/k8s/translate.go: model.Service)        ┴→ Apply
//	    → Services.Apply (apply.go: validate all, one store transaction)
//	    → datapath.PutServices (internal/datapath/services.go, the one
//	      place a service is encoded)
//
// Create, Update, Delete and Apply are all or nothing: a datapath failure
// half-way puts back what was written. Reconcile makes the datapath's
// services the store's at start. ParseNoBackend reads what a flow to a
// VIP without backends gets (xlaned --service-no-backend).
//
// It reaches the rest of the daemon only through core.Core (the lock, the
// store, the datapath).
package services
