package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// What `auto` means on this node is measured, not assumed: a calibration
// builds a throwaway network per mode that can run here, with two endpoints
// in throwaway namespaces, measures TCP between them (IPv4 and IPv6, every
// mode twice, interleaved), then BIG TCP on and off on the fastest mode,
// and stores the choice (calibrate.Choose). `auto` networks created
// afterwards take it; an explicit mode always wins. Until a calibration
// has run, auto is AutoMode with the reason saying so.

// calibPrefix and a calibration's id name its networks; a daemon killed
// mid-calibration removes them at the next start.
const calibPrefix = "xlcal-"

// calibSample is how long each TCP probe runs: 8 mode samples per round,
// two rounds, 8 BIG TCP samples: ~10 s, ~13 s with setup.
const calibSample = 400 * time.Millisecond

type calibState struct {
	run     sync.Mutex // one calibration at a time
	mu      sync.Mutex // guards the fields below
	choice  *calibrate.Choice
	running bool
	lastErr string
	wg      sync.WaitGroup // the calibration at start, waited for by Close
}

// calibration returns the stored choice (nil before the first).
func (d *Daemon) calibration() *calibrate.Choice {
	d.calib.mu.Lock()
	defer d.calib.mu.Unlock()
	return d.calib.choice
}

// Calibration is GET /v1/calibration.
func (d *Daemon) Calibration() *api.Calibration {
	d.calib.mu.Lock()
	defer d.calib.mu.Unlock()
	return &api.Calibration{Choice: d.calib.choice, Running: d.calib.running, LastError: d.calib.lastErr}
}

// loadCalibration reads the stored choice at start and removes what a
// calibration interrupted by a kill left: every network named after its
// id, recorded before it made anything. It runs before Reconcile, which
// would otherwise recreate those endpoints in namespaces that died with
// the killed daemon.
func (d *Daemon) loadCalibration() error {
	var c *calibrate.Choice
	var id string
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		if c, err = tx.Calibration(); err != nil {
			return err
		}
		id, err = tx.CalibrationRunning()
		return err
	})
	if err != nil {
		return err
	}
	d.calib.choice = c
	if id == "" {
		return nil
	}
	if err := d.removeCalibration(id); err != nil {
		return fmt.Errorf("remove what the interrupted calibration %s made: %w", id, err)
	}
	d.log.Info("removed what an interrupted calibration made", "id", id)
	return nil
}

// removeCalibration removes the networks (with their endpoints) of
// calibration id, then its record. Its namespaces are anonymous: they went
// with the handles, or with the process that held them.
func (d *Daemon) removeCalibration(id string) error {
	prefix := calibPrefix + id + "-"
	var nets []model.Network
	err := d.store.View(func(tx *store.Tx) error {
		var err error
		nets, err = tx.Networks()
		return err
	})
	if err != nil {
		return err
	}
	for _, n := range nets {
		if strings.HasPrefix(n.Name, prefix) {
			err = errors.Join(err, d.DeleteNetwork(n.Name, true))
		}
	}
	if err != nil {
		return err
	}
	return d.store.Update(func(tx *store.Tx) error { return tx.PutCalibrationRunning("") })
}

// calibrateAtStart runs the first calibration in the background.
func (d *Daemon) calibrateAtStart() {
	ctx, cancel := context.WithCancel(context.Background())
	d.calib.wg.Add(2)
	go func() {
		defer d.calib.wg.Done()
		select {
		case <-d.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer d.calib.wg.Done()
		defer cancel()
		c, err := d.Calibrate(ctx)
		if err != nil && ctx.Err() != nil {
			d.log.Info("calibration at first start stopped: xlaned is stopping; the next start calibrates")
			return
		}
		if err != nil {
			d.log.Error("calibration at first start", "err", err)
			return
		}
		d.log.Info("calibrated", "auto", c.Mode, "reason", c.Reason, "took", c.Took)
	}()
}

// calibBed is one mode's throwaway network: b listens, a sends.
type calibBed struct {
	mode     model.Mode
	network  string
	a, b     *model.Endpoint
	nsA, nsB netns.NsHandle
}

// Calibrate measures the modes that can run on this node and stores what
// auto resolves to. Nothing is left behind, whatever fails.
func (d *Daemon) Calibrate(ctx context.Context) (*calibrate.Choice, error) {
	if !d.calib.run.TryLock() {
		return nil, model.Conflictf("a calibration is running already")
	}
	defer d.calib.run.Unlock()
	d.calib.mu.Lock()
	d.calib.running = true
	d.calib.mu.Unlock()
	c, err := d.calibrate(ctx)
	d.calib.mu.Lock()
	d.calib.running = false
	d.calib.lastErr = ""
	if err != nil {
		d.calib.lastErr = err.Error()
	} else {
		d.calib.choice = c
	}
	d.calib.mu.Unlock()
	return c, err
}

func (d *Daemon) calibrate(ctx context.Context) (_ *calibrate.Choice, err error) {
	if err := d.dp.Available(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	start := time.Now()
	id := randomID()[:6]
	if err := d.store.Update(func(tx *store.Tx) error { return tx.PutCalibrationRunning(id) }); err != nil {
		return nil, err
	}
	var beds []*calibBed
	defer func() {
		for _, b := range beds {
			b.close()
		}
		err = errors.Join(err, d.removeCalibration(id))
	}()
	for i, m := range []model.Mode{model.ModeKernel, model.ModeTC, model.ModeXDPGeneric, model.ModeXDP} {
		if d.modeMissing(m) != nil {
			continue
		}
		b, err := d.newCalibBed(id, m, i)
		if b != nil {
			beds = append(beds, b)
		}
		if err != nil {
			return nil, fmt.Errorf("calibrate %s: %w", m, err)
		}
	}
	var samples []calibrate.Sample
	probe := func(b *calibBed, big bool) error {
		for _, dst := range b.b.IPs {
			fam := "ipv4"
			if dst.Is6() {
				fam = "ipv6"
			}
			bps, err := calibrate.TCP(ctx, b.nsB, b.nsA, netip.AddrPortFrom(dst, 5201), calibSample)
			if err != nil {
				return fmt.Errorf("calibrate %s %s: %w", b.mode, fam, err)
			}
			samples = append(samples, calibrate.Sample{Mode: string(b.mode), Family: fam, BigTCP: big, Gbps: bps / 1e9})
		}
		return nil
	}
	for round := 0; round < 2; round++ {
		for i := range beds {
			b := beds[i]
			if round == 1 {
				b = beds[len(beds)-1-i]
			}
			if err := probe(b, false); err != nil {
				return nil, err
			}
		}
	}
	choice, err := calibrate.Choose(samples)
	if err != nil {
		return nil, err
	}
	// BIG TCP, on the chosen mode's endpoints: off and on alternately.
	v4, v6 := d.feat.Has(features.BigTCPv4), d.feat.Has(features.BigTCPv6)
	for _, b := range beds {
		if string(b.mode) != choice.Mode || (!v4 && !v6) {
			continue
		}
		for round := 0; round < 2; round++ {
			for _, big := range []bool{false, true} {
				if err := d.setCalibBigTCP(b, big && v4, big && v6); err != nil {
					return nil, err
				}
				if err := probe(b, big); err != nil {
					return nil, err
				}
			}
		}
	}
	if choice, err = calibrate.Choose(samples); err != nil {
		return nil, err
	}
	choice.At = time.Now().UTC().Truncate(time.Second)
	choice.Took = time.Since(start).Round(100 * time.Millisecond).String()
	if err := d.store.Update(func(tx *store.Tx) error { return tx.PutCalibration(&choice) }); err != nil {
		return nil, err
	}
	return &choice, nil
}

// newCalibBed makes mode's throwaway network (198.18.0.0/15, the
// benchmarking range, and a ULA) and its two endpoints. The bed is
// returned, partly built, with an error too, for removeCalibBed.
func (d *Daemon) newCalibBed(id string, m model.Mode, i int) (*calibBed, error) {
	no := false
	req := api.NetworkCreate{
		Name:       fmt.Sprintf("%s%s-%s", calibPrefix, id, m),
		Subnets:    []string{fmt.Sprintf("198.18.%d.0/24", 200+i), fmt.Sprintf("fd78:6c63:616c:%x::/64", 0xc8+i)},
		Mode:       string(m),
		Masquerade: &no,
		Device:     string(model.DeviceVeth),
	}
	if _, err := d.CreateNetwork(req); err != nil {
		return nil, err
	}
	b := &calibBed{mode: m, network: req.Name, nsA: netns.None(), nsB: netns.None()}
	for _, side := range []string{"a", "b"} {
		ns, path, err := calibrate.NewNetns()
		if err != nil {
			return b, err
		}
		if side == "a" {
			b.nsA = ns
		} else {
			b.nsB = ns
		}
		e, err := d.AddEndpoint(api.EndpointAdd{Network: req.Name, Netns: path, IfName: "eth0"})
		if err != nil {
			return b, err
		}
		if side == "a" {
			b.a = e
		} else {
			b.b = e
		}
	}
	// The listeners bind the endpoint's addresses: IPv6 ones must have
	// left duplicate address detection.
	return b, waitAddrs(b.nsB, b.b.IPs)
}

func (d *Daemon) setCalibBigTCP(b *calibBed, v4, v6 bool) error {
	for _, e := range []*model.Endpoint{b.a, b.b} {
		host, err := netconf.HostLink(e)
		if err != nil {
			return err
		}
		if err := netconf.SetBigTCP(e, host, v4, v6); err != nil {
			return err
		}
	}
	return nil
}

// close releases the bed's namespace handles (removeCalibration removes
// the namespaces).
func (b *calibBed) close() {
	for _, ns := range []netns.NsHandle{b.nsA, b.nsB} {
		if ns.IsOpen() {
			ns.Close()
		}
	}
}

// waitAddrs waits up to 3 s until every address is usable in ns (IPv6
// duplicate address detection done).
func waitAddrs(ns netns.NsHandle, addrs []netip.Addr) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		list, err := h.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		ready := 0
		for _, want := range addrs {
			for _, a := range list {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == want && a.Flags&unix.IFA_F_TENTATIVE == 0 {
					ready++
					break
				}
			}
		}
		if ready == len(addrs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("addresses %v not ready after 3 s", addrs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
