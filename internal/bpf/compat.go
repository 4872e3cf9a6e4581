package bpf

import (
	"errors"
	"strings"

	"github.com/cilium/ebpf"
)

// XDPErr says why the XDP programs (endpoint and uplink) did not load on
// this kernel, or nil. The tc and netkit programs do not depend on them.
func (o *Objects) XDPErr() error { return o.xdpErr }

// VerifierSummary shortens a verifier error to its cause and the log line
// that says what the verifier refused, for `xlane status`.
func VerifierSummary(err error) string {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for i := len(ve.Log) - 1; i >= 0; i-- {
		l := strings.TrimSpace(ve.Log[i])
		if l == "" || strings.HasPrefix(l, "processed ") || strings.HasPrefix(l, "verification time") {
			continue
		}
		return ve.Cause.Error() + ": " + l
	}
	return ve.Cause.Error()
}
