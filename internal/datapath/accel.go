package datapath

import (
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/bpf"
)

// AccelSettings is what EnableAccel attaches with.
type AccelSettings struct {
	Cgroup string         // a cgroup2 directory, checked by the caller
	Nets   []netip.Prefix // both ends in one of them
	Ports  []uint16       // one end's port among them; empty: any
}

// AccelStatus is the kernel's side of acceleration.
type AccelStatus struct {
	Attached bool   // the sockops link is pinned
	CgroupID uint64 // the cgroup it is attached to
	On       bool   // xlane_accel_config says on
	Sockets  int    // sockets in the SOCKHASH (live connections' ends)
	Counters map[string]uint64
}

func (d *BPF) accelObjs() (*bpf.AccelObjects, error) {
	if d.accel == nil {
		o, err := bpf.LoadAccel(d.sockDir("maps"))
		if err != nil {
			return nil, err
		}
		d.accel = o
	}
	return d.accel, nil
}

// EnableAccel writes the filters, attaches sk_msg to the socket map and
// sockops to s.Cgroup, then turns acceleration on. A failure leaves it
// off.
func (d *BPF) EnableAccel(s AccelSettings) error {
	o, err := d.accelObjs()
	if err != nil {
		return err
	}
	if err := accel.SetConfig(o, false, s.Nets, s.Ports); err != nil {
		return err
	}
	if err := accel.AttachMsg(o); err != nil {
		return err
	}
	if err := attachCgroupPinned(d.sockDir("accel_sockops"), s.Cgroup, ebpf.AttachCGroupSockOps, o.Sockops()); err != nil {
		return err
	}
	if err := accel.SetConfig(o, true, s.Nets, s.Ports); err != nil {
		unpinLink(d.sockDir("accel_sockops"))
		return err
	}
	return nil
}

// DisableAccel turns acceleration off and detaches sockops. Accelerated
// connections carry on: each falls back to the normal path at its next
// message (sticky), after what it already redirected, and its sockets
// leave the map as they close.
func (d *BPF) DisableAccel() error {
	if d.sockUnused("xlane_accel_config", d.accel != nil) {
		return nil // never enabled
	}
	o, err := d.accelObjs()
	if err != nil {
		return err
	}
	if err := accel.SetConfig(o, false, nil, nil); err != nil {
		return err
	}
	return unpinLink(d.sockDir("accel_sockops"))
}

// AccelStatus reads the pins and counters (zero, without counters, where
// acceleration was never used).
func (d *BPF) AccelStatus() (AccelStatus, error) {
	var st AccelStatus
	if d.sockUnused("xlane_accel_stats", d.accel != nil) {
		return st, nil
	}
	if l, err := link.LoadPinnedLink(d.sockDir("accel_sockops"), nil); err == nil {
		st.Attached = true
		if info, err := l.Info(); err == nil && info.Cgroup() != nil {
			st.CgroupID = info.Cgroup().CgroupId
		}
		l.Close()
	}
	o, err := d.accelObjs()
	if err != nil {
		return st, err
	}
	var c bpf.AccelConfig
	if err := o.Config().Lookup(uint32(0), &c); err == nil {
		st.On = c.Flags&bpf.AccelOn != 0
	}
	var k bpf.AccelKey
	var v uint64
	it := o.Socks().Iterate()
	for it.Next(&k, &v) {
		st.Sockets++
	}
	st.Counters, err = accel.ReadStats(o.Stats())
	return st, err
}
