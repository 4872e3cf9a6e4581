package rules

import "github.com/xlane-dev/xlane/internal/model"

// DDoS is the uplink's DDoS defence: per-source token buckets and the
// early drop of malformed headers (the prefix blocklist is kept apart: it
// may hold millions of entries). Zero rates are off.
type DDoS struct {
	PPS       uint32 `json:"pps,omitempty" yaml:"pps,omitempty"`             // packets/s per source
	Burst     uint32 `json:"burst,omitempty" yaml:"burst,omitempty"`         // bucket depth (default: PPS)
	SYNPPS    uint32 `json:"syn_pps,omitempty" yaml:"syn_pps,omitempty"`     // TCP SYNs/s per source
	SYNBurst  uint32 `json:"syn_burst,omitempty" yaml:"syn_burst,omitempty"` // (default: SYNPPS)
	V4Prefix  uint8  `json:"v4_prefix,omitempty" yaml:"v4_prefix,omitempty"` // source granularity (default 32)
	V6Prefix  uint8  `json:"v6_prefix,omitempty" yaml:"v6_prefix,omitempty"` // (default 64)
	Malformed bool   `json:"malformed,omitempty" yaml:"malformed,omitempty"` // drop malformed headers
}

// Normalize fills defaults and validates.
func (d *DDoS) Normalize() error {
	if d.Burst == 0 {
		d.Burst = d.PPS
	}
	if d.SYNBurst == 0 {
		d.SYNBurst = d.SYNPPS
	}
	if d.V4Prefix == 0 {
		d.V4Prefix = 32
	}
	if d.V6Prefix == 0 {
		d.V6Prefix = 64
	}
	if d.V4Prefix > 32 {
		return model.Fieldf("v4_prefix", "%d: want 1-32", d.V4Prefix)
	}
	if d.V6Prefix > 128 {
		return model.Fieldf("v6_prefix", "%d: want 1-128", d.V6Prefix)
	}
	if d.PPS > 100_000_000 || d.SYNPPS > 100_000_000 {
		return model.Fieldf("pps", "at most 100000000 per second")
	}
	if d.Burst > 100_000_000 || d.SYNBurst > 100_000_000 {
		return model.Fieldf("burst", "at most 100000000 packets")
	}
	return nil
}
