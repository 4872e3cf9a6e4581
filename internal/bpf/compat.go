package bpf

import (
	"errors"

	"github.com/cilium/ebpf"
)

// XDPErr says why the XDP programs (endpoint and uplink) did not load on
// this kernel, or nil. The tc and netkit programs do not depend on them.
func (o *Objects) XDPErr() error { return o.xdpErr }

// VerifierSummary shortens a verifier error to its message and the last
// lines of the log, for `xlane status`.
func VerifierSummary(err error) string {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	msg := ve.Cause.Error()
	if n := len(ve.Log); n > 0 {
		msg += ": " + ve.Log[n-1]
		if n > 1 {
			msg = ve.Cause.Error() + ": " + ve.Log[n-2] + " / " + ve.Log[n-1]
		}
	}
	return msg
}
