package daemon

import (
	"github.com/xlane-dev/xlane/internal/api"
)

// Flows lists conntrack entries.
func (d *Daemon) Flows(limit int) ([]api.Flow, error) {
	fs, err := d.dp.Flows(limit)
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
func (d *Daemon) FlushFlows() (int, error) {
	d.calib.LockProbe()
	defer d.calib.UnlockProbe()
	return d.dp.FlushCT()
}

// CTStats summarises the conntrack table.
func (d *Daemon) CTStats() (*api.CTStats, error) {
	s, err := d.dp.CTStats()
	if err != nil {
		return nil, err
	}
	out := &api.CTStats{Entries: s.Entries, MaxEntries: s.MaxEntries, Expired: s.Expired, BytesPerEntry: s.BytesPerEntry,
		GCRuns: d.ct.gcRuns.Load(), GCDeleted: d.ct.gcDeleted.Load()}
	if cs, err := d.dp.Counters(0); err == nil {
		for k, c := range cs {
			if k.Reason.String() == "pass_ct_full" {
				out.TableFull += c.Packets
			}
		}
	}
	return out, nil
}
