package datapath

import "github.com/xlane-dev/xlane/internal/bpf"

// The datapath's vocabulary, as its callers name it: the load options,
// the counters' reasons, directions and hooks (enum xl_reason etc. of
// bpf/lib/abi.h, names read from BTF), the proxy's exemption kinds, a
// verifier error's summary. They are internal/bpf's, passed through here
// so that no package but the datapath imports internal/bpf
// (TestOnlyDatapathImportsBPF); map keys, values and flags never leave
// the datapath.
type (
	Options = bpf.Options
	Reason  = bpf.Reason
	Dir     = bpf.Dir
	Hook    = bpf.Hook
)

const (
	DirEgress  = bpf.DirEgress
	DirIngress = bpf.DirIngress
	ReasonMax  = bpf.ReasonMax

	ClassForward = bpf.ClassForward
	ClassDrop    = bpf.ClassDrop

	ProxyExemptMark   = bpf.ProxyExemptMark
	ProxyExemptCgroup = bpf.ProxyExemptCgroup
	ProxyExemptUID    = bpf.ProxyExemptUID

	// DefaultCTSize is the conntrack table's size when Options.CTSize
	// is 0.
	DefaultCTSize = bpf.DefaultCTSize
)

// VerifierSummary shortens a verifier error to its cause and the log
// line that says what the verifier refused, for `xlane status`.
func VerifierSummary(err error) string { return bpf.VerifierSummary(err) }
