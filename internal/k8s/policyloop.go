package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// policySettle is how long a policy sync waits after the first event of
// a burst: longer than settle, as each sync translates every pod and
// policy of the cluster (a pod churn's starts and stops come as a
// stream; bench/scale: 15,000 pods, ~0.15 s a sync).
const policySettle = 50 * time.Millisecond

// policyLoop applies the NetworkPolicies after every burst of changes of
// their inputs (policies, pods, namespaces, nodes), apart from loop, and
// retries a failed apply.
func (c *controller) policyLoop(ctx context.Context, failed bool) {
	retry := time.NewTimer(retryAfter)
	if !failed {
		retry.Stop()
	}
	for {
		again := false
		select {
		case <-ctx.Done():
			return
		case <-c.pkick:
		case <-retry.C:
			again = true
		}
		time.Sleep(policySettle)
		select {
		case <-c.pkick:
		default:
		}
		if !c.takePolicies() && !again {
			continue
		}
		if err := c.policySync(); err != nil {
			c.cfg.Log.Error("kubernetes policy sync", "err", err)
			retry.Reset(retryAfter)
		}
	}
}

// policySync applies the policies with this node's addresses as its Node
// has them now; failing, they are marked for the retry.
func (c *controller) policySync() error {
	c.takePolicies()
	var self []netip.Addr
	if n, err := c.nodes.Lister().Get(c.cfg.NodeName); err == nil {
		self = NodeAddrs(n)
	}
	if err := c.syncPolicies(self); err != nil {
		c.mu.Lock()
		c.dirty.policies = true
		c.mu.Unlock()
		return fmt.Errorf("apply network policies: %w", err)
	}
	return nil
}
