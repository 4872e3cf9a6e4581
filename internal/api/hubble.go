package api

// HubbleStatus is the Hubble server's part of the status (xlaned --hubble;
// docs/hubble.md).
type HubbleStatus struct {
	Socket string `json:"socket,omitempty"`
	Listen string `json:"listen,omitempty"`
	TLS    bool   `json:"tls,omitempty"`
	// Flows held in the ring, its size, and every flow recorded since
	// the start.
	Flows    uint64 `json:"flows"`
	MaxFlows uint64 `json:"max_flows"`
	Seen     uint64 `json:"seen"`
	// RingBytes is the ring's memory (its slots; the few distinct
	// strings they share are not counted).
	RingBytes uint64 `json:"ring_bytes"`
	// Identities are the addresses the names cache knows, present and
	// kept after their endpoint or pod went away.
	Identities     int `json:"identities"`
	IdentitiesGone int `json:"identities_gone"`
	// Followers are the GetFlows streams following now; Skipped the
	// flows followers missed, overwritten before they read them.
	Followers int64  `json:"followers"`
	Skipped   uint64 `json:"skipped"`
	// FeedDropped: events the monitor could not hand the ring in time;
	// Suppressed and RingLost: the monitor's rate limit and full event
	// ring (all of the monitor's clients).
	FeedDropped uint64 `json:"feed_dropped"`
	Suppressed  uint64 `json:"suppressed"`
	RingLost    uint64 `json:"ring_lost"`
	// Error says why the ring gets no flows (the monitor is off).
	Error string `json:"error,omitempty"`
	// Export is the JSON lines export (--hubble-export-file-path).
	Export *HubbleExport `json:"export,omitempty"`
}

// HubbleExport counts the export's lines: written (flows and lost
// events), flows lost (overwritten in the ring before the export got to
// them) and failed writes.
type HubbleExport struct {
	Path      string `json:"path"`
	Lines     uint64 `json:"lines"`
	Lost      uint64 `json:"lost"`
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
}
