package main

import (
	"testing"
	"time"
)

// The plan gives every Service 1 to 50 pods, skewed (some Services have
// the maximum), and every pod at most one Service.
func TestPlan(t *testing.T) {
	o := smallOptions()
	p := newPlan(o)
	if len(p.podSvc) != o.nodes*o.podsPerNode {
		t.Fatalf("%d pods planned, want %d", len(p.podSvc), o.nodes*o.podsPerNode)
	}
	count := make([]int, o.services)
	for _, k := range p.podSvc {
		if k >= 0 {
			count[k]++
		}
	}
	full := 0
	for k, n := range count {
		if n != p.sizes[k] || n < 1 || n > maxEndpoints {
			t.Fatalf("Service %d: %d pods, size %d (want 1 to %d)", k, n, p.sizes[k], maxEndpoints)
		}
		if n == maxEndpoints {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no Service with %d endpoints: the sizes are not spread", maxEndpoints)
	}
	if a, b := podCIDR(0).String(), podCIDR(2+o.nodes).String(); a != "10.128.0.0/24" || b != "10.129.246.0/24" {
		t.Errorf("pod CIDRs: slot 0 %s, slot %d %s", a, 2+o.nodes, b)
	}
}

// -small sets the small form's sizes; flags given beside it win.
func TestParseFlagsSmall(t *testing.T) {
	o, err := parseFlags([]string{"-small", "-nodes", "600"})
	if err != nil {
		t.Fatal(err)
	}
	s := smallOptions()
	if o.nodes != 600 || o.services != s.services || o.policies != s.policies || o.churn != s.churn || o.podRate != s.podRate {
		t.Errorf("-small -nodes 600: %+v", o)
	}
	o, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.nodes != 1000 || o.services != 20000 || o.churn != time.Minute {
		t.Errorf("defaults: %+v, want the 1,000-node level", o)
	}
	if _, err := parseFlags([]string{"-services", "0"}); err == nil {
		t.Error("-services 0 accepted")
	}
}
