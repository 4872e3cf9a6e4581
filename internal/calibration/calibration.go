package calibration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/core"
	"github.com/xlane-dev/xlane/internal/features"
	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/internal/netconf"
	"github.com/xlane-dev/xlane/internal/store"
)

// What `auto` means on this node is measured, not assumed: a calibration
// builds a throwaway network per mode that can run here, with two endpoints
// in throwaway namespaces, and measures TCP between them in
// calibrate.Rounds interleaved rounds (IPv4 and IPv6, every mode once a
// round, the order reversed every other round). A mode is ranked before
// the default (AutoMode) only where the rule lets it: its slowest round
// beats the default's fastest by calibrate.Margin (calibrate.Rule says it
// in full; noise on a shared machine once made kernel mode "win" by 1-35 %
// in 5 of 7 first starts). BIG TCP is then measured off and on in
// alternation, as many rounds, on the mode a network created with no
// flags gets, and turned on per family by the same rule. `auto` networks
// created afterwards take the first mode of the ranking that gives them
// every feature they ask for (automode.go); an explicit mode always wins,
// and existing networks keep what they have. Until a calibration has run,
// auto is AutoMode with the reason saying so.
//
// A calibration's networks and endpoints are its own: their names start
// with calibPrefix, which no other network may take; user listings (network
// ls, endpoint ls, status, metrics) leave them out; a crash leaves them in
// the store under the calibration's id, for the next start to remove. A
// user's `ct flush` waits for the probe under way (calibState.probe), so
// no probe's connection loses its conntrack entries mid-stream.

// calibPrefix and a calibration's id name its networks (the core's hidden
// ones); a daemon killed mid-calibration removes them at the next start.
const calibPrefix = core.HiddenPrefix

// calibSample is how long each TCP probe runs: 8 mode samples per round
// (4 modes, 2 families), 3 rounds, then 12 BIG TCP samples (2 families,
// off and on, 3 rounds): 36 samples, ~11 s; ~14 s with setup.
const calibSample = 300 * time.Millisecond

type calibState struct {
	run     sync.Mutex // one calibration at a time
	mu      sync.Mutex // guards the fields below
	choice  *calibrate.Choice
	running bool
	id      string // the running calibration's, in its networks' names
	lastErr string
	wg      sync.WaitGroup // the calibration at start, waited for by Close
	// probe is held for each probe's TCP connection, and by a user's ct
	// flush (FlushFlows): a flush goes between probes.
	probe sync.Mutex
}

// Runner is the feature: the stored choice and the calibration under way.
type Runner struct {
	core  core.Core
	log   *slog.Logger
	calib calibState
}

// New makes the feature; Load reads the stored choice.
func New(c core.Core) *Runner { return &Runner{core: c, log: c.Log()} }

// Choice returns the stored choice (nil before the first).
func (d *Runner) Choice() *calibrate.Choice {
	d.calib.mu.Lock()
	defer d.calib.mu.Unlock()
	return d.calib.choice
}

// SetChoice replaces the choice in memory, not in the store: the core's
// tests of what auto resolves to under a given calibration.
func (d *Runner) SetChoice(c *calibrate.Choice) {
	d.calib.mu.Lock()
	defer d.calib.mu.Unlock()
	d.calib.choice = c
}

// Calibration is GET /v1/calibration.
func (d *Runner) Calibration() *api.Calibration {
	d.calib.mu.Lock()
	defer d.calib.mu.Unlock()
	return &api.Calibration{Choice: d.calib.choice, Running: d.calib.running, LastError: d.calib.lastErr, Rule: calibrate.Rule}
}

// Load reads the stored choice at start and removes what a
// calibration interrupted by a kill left: every network named after its
// id, recorded before it made anything. It runs before Reconcile, which
// would otherwise recreate those endpoints in namespaces that died with
// the killed daemon.
func (d *Runner) Load() error {
	var c *calibrate.Choice
	var id string
	err := d.core.Store().View(func(tx *store.Tx) error {
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
	if c != nil && c.Version != calibrate.RuleVersion {
		d.log.Info("stored calibration made by an older rule: auto is the default until a calibration by the current rule",
			"rule_version", c.Version, "current", calibrate.RuleVersion, "mode", c.Mode)
		c = nil
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
func (d *Runner) removeCalibration(id string) error {
	prefix := calibPrefix + id + "-"
	var nets []model.Network
	err := d.core.Store().View(func(tx *store.Tx) error {
		var err error
		nets, err = tx.Networks()
		return err
	})
	if err != nil {
		return err
	}
	for _, n := range nets {
		if strings.HasPrefix(n.Name, prefix) {
			err = errors.Join(err, d.core.RemoveNetwork(n.Name))
		}
	}
	if err != nil {
		return err
	}
	return d.core.Store().Update(func(tx *store.Tx) error { return tx.PutCalibrationRunning("") })
}

// AtStart runs the first calibration in the background; Close waits for
// it.
func (d *Runner) AtStart() {
	ctx, cancel := context.WithCancel(context.Background())
	d.calib.wg.Add(2)
	go func() {
		defer d.calib.wg.Done()
		select {
		case <-d.core.Done():
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
func (d *Runner) Calibrate(ctx context.Context) (*calibrate.Choice, error) {
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

func (d *Runner) calibrate(ctx context.Context) (_ *calibrate.Choice, err error) {
	if err := d.core.Datapath().Available(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	start := time.Now()
	id := core.RandomID()[:6]
	if err := d.core.Store().Update(func(tx *store.Tx) error { return tx.PutCalibrationRunning(id) }); err != nil {
		return nil, err
	}
	d.setCalibID(id)
	var beds []*calibBed
	defer func() {
		// The networks first: closing a bed's handles tears its
		// namespace down, and the kernel deletes its veths in the
		// background, racing the endpoints' removal.
		err = errors.Join(err, d.removeCalibration(id))
		for _, b := range beds {
			b.close()
		}
		d.setCalibID("")
	}()
	for _, m := range []model.Mode{model.ModeKernel, model.ModeTC, model.ModeXDPGeneric, model.ModeXDP} {
		if d.core.ModeMissing(m) != nil {
			continue
		}
		b, err := d.newCalibBed(id, m)
		if b != nil {
			beds = append(beds, b)
		}
		if err != nil {
			return nil, fmt.Errorf("calibrate %s: %w", m, err)
		}
	}
	var samples []calibrate.Sample
	probe := func(b *calibBed, series string, round int, big bool) error {
		for _, dst := range b.b.IPs {
			fam := "ipv4"
			if dst.Is6() {
				fam = "ipv6"
			}
			bps, err := d.calibProbe(ctx, b, dst)
			if err != nil {
				return fmt.Errorf("calibrate %s %s: %w", b.mode, fam, err)
			}
			samples = append(samples, calibrate.Sample{Mode: string(b.mode), Family: fam, BigTCP: big, Gbps: bps / 1e9, Probe: series, Round: round})
		}
		return nil
	}
	for round := 0; round < calibrate.Rounds; round++ {
		for i := range beds {
			b := beds[i]
			if round%2 == 1 {
				b = beds[len(beds)-1-i]
			}
			if err := probe(b, calibrate.ProbeMode, round, false); err != nil {
				return nil, err
			}
		}
	}
	choice, err := calibrate.Choose(samples, string(core.AutoMode))
	if err != nil {
		return nil, err
	}
	// BIG TCP, on the endpoints of the mode a network created with no
	// flags gets: off and on alternately, the order swapped every round.
	bigMode := d.core.DefaultMode(&choice)
	v4, v6 := d.core.Kernel().Has(features.BigTCPv4), d.core.Kernel().Has(features.BigTCPv6)
	for _, b := range beds {
		if b.mode != bigMode || (!v4 && !v6) {
			continue
		}
		for round := 0; round < calibrate.Rounds; round++ {
			order := []bool{false, true}
			if round%2 == 1 {
				order = []bool{true, false}
			}
			for _, big := range order {
				if err := d.setCalibBigTCP(b, big && v4, big && v6); err != nil {
					return nil, err
				}
				if err := probe(b, calibrate.ProbeBigTCP, round, big); err != nil {
					return nil, err
				}
			}
		}
		choice.Samples = samples
		choice.ChooseBigTCP(string(bigMode))
	}
	choice.At = time.Now().UTC().Truncate(time.Second)
	choice.Took = time.Since(start).Round(100 * time.Millisecond).String()
	if err := d.core.Store().Update(func(tx *store.Tx) error { return tx.PutCalibration(&choice) }); err != nil {
		return nil, err
	}
	return &choice, nil
}

// calibProbe measures TCP from b's a to dst on b's b, holding the probe
// lock (a user's ct flush waits for it). A probe that fails is tried once
// more: a user's command beside a calibration (a firewall change, a
// flush that came between a probe's connect and its lock) costs a sample,
// not the calibration.
func (d *Runner) calibProbe(ctx context.Context, b *calibBed, dst netip.Addr) (float64, error) {
	var err error
	for try := 0; try < 2 && ctx.Err() == nil; try++ {
		d.calib.probe.Lock()
		var bps float64
		bps, err = calibrate.TCP(ctx, b.nsB, b.nsA, netip.AddrPortFrom(dst, 5201), calibSample)
		d.calib.probe.Unlock()
		if err == nil {
			return bps, nil
		}
		d.log.Info("calibration probe failed, trying once more", "mode", b.mode, "dst", dst, "err", err)
	}
	if err == nil {
		err = ctx.Err()
	}
	return 0, err
}

// LockProbe waits for the probe under way and keeps the next from
// starting until UnlockProbe: a user's ct flush goes between probes.
func (d *Runner) LockProbe() { d.calib.probe.Lock() }

// UnlockProbe lets the next probe start.
func (d *Runner) UnlockProbe() { d.calib.probe.Unlock() }

// Close waits for the calibration at start (it removes its networks first
// when the core's Done closes).
func (d *Runner) Close() { d.calib.wg.Wait() }

func (d *Runner) setCalibID(id string) {
	d.calib.mu.Lock()
	d.calib.id = id
	d.calib.mu.Unlock()
}

// ValidateNetwork refuses a network named in the calibration's namespace
// (core.NetworkValidator: at core.CheckName).
func (d *Runner) ValidateNetwork(_ *store.Tx, at core.NetworkCheck, req *api.NetworkCreate, _ *model.Network) error {
	if at != core.CheckName {
		return nil
	}
	return d.Reserved(req.Name)
}

// ValidateEndpoint refuses an endpoint on a network of the calibration's
// namespace other than the running calibration's own, as if there were no
// such network (core.EndpointValidator).
func (d *Runner) ValidateEndpoint(_ *store.Tx, req *api.EndpointAdd, _ *model.Endpoint, _ *model.Network) error {
	if d.Reserved(req.Network) != nil {
		return model.Fieldf("network", "%q: no such network", req.Network)
	}
	return nil
}

// Reserved refuses a network name in the calibration's namespace
// unless it is the running calibration's own.
func (d *Runner) Reserved(name string) error {
	if !core.Hidden(name) {
		return nil
	}
	d.calib.mu.Lock()
	id := d.calib.id
	d.calib.mu.Unlock()
	if id != "" && strings.HasPrefix(name, calibPrefix+id+"-") {
		return nil
	}
	return model.Fieldf("name", "%q: names starting with %s are reserved for xlane calibrate's throwaway networks", name, calibPrefix)
}

// newCalibBed makes mode's throwaway network (a free /24 of
// 198.18.0.0/15, the benchmarking range, and a free /64 of a ULA:
// calibSubnets) and its two endpoints. The bed is returned, partly built,
// with an error too, for removeCalibBed.
func (d *Runner) newCalibBed(id string, m model.Mode) (*calibBed, error) {
	no := false
	v4, v6, err := d.calibSubnets()
	if err != nil {
		return nil, err
	}
	req := api.NetworkCreate{
		Name:       fmt.Sprintf("%s%s-%s", calibPrefix, id, m),
		Subnets:    []string{v4.String(), v6.String()},
		Mode:       string(m),
		Masquerade: &no,
		Device:     string(model.DeviceVeth),
	}
	if _, err := d.core.CreateNetwork(req); err != nil {
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
		e, err := d.core.AddEndpoint(api.EndpointAdd{Network: req.Name, Netns: path, IfName: "eth0"})
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

// calibSubnets picks a calibration network's subnets: the first /24 of
// 198.18.0.0/15 from 198.18.200.0 on, and the /64 of fd78:6c63:616c::/48
// with the same number, that no network holds and the node neither has an
// address in nor routes: a user's network in the benchmarking range does
// not fail a calibration.
func (d *Runner) calibSubnets() (v4, v6 netip.Prefix, err error) {
	var used []netip.Prefix
	err = d.core.Store().View(func(tx *store.Tx) error {
		nets, err := tx.Networks()
		for _, n := range nets {
			used = append(used, n.Subnets...)
		}
		return err
	})
	if err != nil {
		return v4, v6, err
	}
	free := func(p netip.Prefix) bool {
		for _, u := range used {
			if u.Overlaps(p) {
				return false
			}
		}
		return netconf.CheckSubnetFree(p) == nil
	}
	for k := 0; k < 512; k++ {
		i := (200 + k) % 512
		v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i/256), byte(i % 256), 0}), 24)
		v6 = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x78, 0x6c, 0x63, 0x61, 0x6c, byte(i >> 8), byte(i)}), 64)
		if free(v4) && free(v6) {
			return v4, v6, nil
		}
	}
	return v4, v6, fmt.Errorf("no free /24 in 198.18.0.0/15 with a free /64 in fd78:6c63:616c::/48 for a calibration network")
}

func (d *Runner) setCalibBigTCP(b *calibBed, v4, v6 bool) error {
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
