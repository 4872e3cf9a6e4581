package datapath

import "github.com/xlane-dev/xlane/internal/bpf"

// XDPErr says why the XDP modes cannot run here (their programs did not
// load on this kernel), or nil.
func (d *BPF) XDPErr() error { return d.objs.XDPErr() }

// Available is nil: the programs loaded.
func (d *BPF) Available() error { return nil }

// FirewallMaps are the firewall's maps, as loaded (and pinned) by Open.
func (d *BPF) FirewallMaps() (bpf.FwMaps, error) { return d.objs.Firewall(), nil }

// MonitorMaps are the event monitor's maps, as loaded by Open.
func (d *BPF) MonitorMaps() (bpf.MonitorMaps, error) { return d.objs.Monitor(), nil }

// NewTracer loads the tc programs again on the live configuration maps
// and a copy of the state (bpf.Tracer).
func (d *BPF) NewTracer() (*bpf.Tracer, error) { return d.objs.NewTracer() }

// ReplacedPins lists the pinned maps Open replaced because an older xlaned
// left them with another layout (their content starts afresh).
func (d *BPF) ReplacedPins() []string { return d.objs.ReplacedPins() }
