package observe

import (
	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/metrics"
	"github.com/xlane-dev/xlane/internal/store"
)

// Reporter is `xlane status`'s health summary (health.go) and the
// Prometheus scrape's snapshot (metrics.go). Unlike the Observer it needs
// no open datapath: it is there from the daemon's start, kernel mode too.
type Reporter struct {
	c    core.Core
	deps ReportDeps
}

// ReportDeps are what other features tell the reporter; each is read at
// every report (a nil field: a feature this daemon does not run).
type ReportDeps struct {
	// Rules reads the firewall's rules in tx, by name (the firewall's
	// control: its rule set).
	Rules func(tx *store.Tx) (map[string]RuleSlot, error)
	// RuleCounters is the firewall's counter of a rule slot, nil while
	// the firewall counts nothing here (not started, not available).
	RuleCounters func() func(slot uint32) (firewall.Counter, error)
	// Neigh is the neighbour mirror's status (internal/cluster).
	Neigh func() *api.NeighMirror
	// WireGuard is the encryption's per-peer state (internal/cluster).
	WireGuard func() []metrics.WireGuardPeer
}

// RuleSlot is a firewall rule's counter slot and action.
type RuleSlot = firewall.RuleSlot

// NewReporter is the reporter of c.
func NewReporter(c core.Core, deps ReportDeps) *Reporter {
	return &Reporter{c: c, deps: deps}
}
