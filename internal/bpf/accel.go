package bpf

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Socket acceleration types, generated from bpf/lib/accel.h.
type (
	AccelKey    = sockaccelAccelKey
	AccelSk     = sockaccelAccelSk
	AccelConfig = sockaccelAccelConfig
	AccelNetKey = sockaccelAccelNetKey
	AccelStat   = sockaccelAccelStat
)

// Accel flags and the counter count, from bpf/lib/accel.h.
const (
	AccelOn          = uint32(sockaccelAccelFlagsACCEL_ON)
	AccelFilterNets  = uint32(sockaccelAccelFlagsACCEL_FILTER_NETS)
	AccelFilterPorts = uint32(sockaccelAccelFlagsACCEL_FILTER_PORTS)
	AccelStatMax     = sockaccelAccelStatACCEL_STAT_MAX
	AccelSkFallback  = uint32(sockaccelAccelSkFlagsACCEL_SK_FALLBACK)
)

// AccelObjects are the socket acceleration programs (bpf/sock_accel.c)
// and their maps.
type AccelObjects struct{ sockaccelObjects }

// Sockops is the program that adds established sockets to the SOCKHASH.
func (o *AccelObjects) Sockops() *ebpf.Program { return o.XlaneAccelSockops }

// Msg is the sk_msg program, attached to the SOCKHASH.
func (o *AccelObjects) Msg() *ebpf.Program { return o.XlaneAccelMsg }

// Socks is the SOCKHASH.
func (o *AccelObjects) Socks() *ebpf.Map { return o.XlaneAccelSocks }

// Config, Nets, Ports and Stats are the daemon's maps (bpf/lib/accel.h).
func (o *AccelObjects) Config() *ebpf.Map { return o.XlaneAccelConfig }
func (o *AccelObjects) Nets() *ebpf.Map   { return o.XlaneAccelNets }
func (o *AccelObjects) Ports() *ebpf.Map  { return o.XlaneAccelPorts }
func (o *AccelObjects) Stats() *ebpf.Map  { return o.XlaneAccelStats }

// LoadAccel loads the socket acceleration programs with their maps pinned
// in pinDir (adopting pinned ones), or unpinned for "" (the self-test's
// throwaway copy).
func LoadAccel(pinDir string) (*AccelObjects, error) {
	spec, err := loadSockaccel()
	if err != nil {
		return nil, err
	}
	opts, err := sockSpecOptions(spec, pinDir)
	if err != nil {
		return nil, err
	}
	var o AccelObjects
	if err := spec.LoadAndAssign(&o.sockaccelObjects, opts); err != nil {
		return nil, fmt.Errorf("load socket acceleration programs: %w", err)
	}
	return &o, nil
}

// (enum accel_stat), indexed by value.
func AccelStatNames() ([]string, error) { return enumNames(loadSockaccel, "accel_stat") }
