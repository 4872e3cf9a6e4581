package observe

import (
	"github.com/xlane-dev/xlane/internal/api"
)

// Flows lists conntrack entries.
func (o *Observer) Flows(limit int) ([]api.Flow, error) {
	fs, err := o.c.Datapath().Flows(limit)
	out := make([]api.Flow, 0, len(fs))
	for _, f := range fs {
		af := api.Flow{Proto: protoName(f.Proto), Src: f.Src.String(), Dst: f.Dst.String(), Direction: "original",
			State: f.State, NAT: f.NAT, Packets: f.Packets, Bytes: f.Bytes, ExpiresIn: f.ExpiresInSeconds}
		if f.Reply {
			af.Direction = "reply"
		}
		if f.NAT != "" {
			af.NATTo = f.NATTo.String()
		}
		if f.NATSrc.IsValid() {
			af.NATTo += " from " + f.NATSrc.String()
		}
		out = append(out, af)
	}
	return out, err
}

// FlushFlows deletes every conntrack entry. Beside a calibration it waits
// for the probe under way (at most one probe, calibSample long): a
// connection whose entries vanish mid-stream is reset, and a calibration
// must not fail over a user's flush (internal/calibration).
func (o *Observer) FlushFlows() (int, error) {
	if p := o.deps.Probe; p != nil {
		p.LockProbe()
		defer p.UnlockProbe()
	}
	return o.c.Datapath().FlushCT()
}

// CTStats summarises the conntrack table.
func (o *Observer) CTStats() (*api.CTStats, error) {
	s, err := o.c.Datapath().CTStats()
	if err != nil {
		return nil, err
	}
	gcRuns, gcDeleted := o.c.CTGC()
	out := &api.CTStats{Entries: s.Entries, MaxEntries: s.MaxEntries, Expired: s.Expired, BytesPerEntry: s.BytesPerEntry,
		GCRuns: gcRuns, GCDeleted: gcDeleted}
	if cs, err := o.c.Datapath().Counters(0); err == nil {
		for k, c := range cs {
			if k.Reason.String() == "pass_ct_full" {
				out.TableFull += c.Packets
			}
		}
	}
	return out, nil
}
