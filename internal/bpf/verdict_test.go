package bpf

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// TestReasonClasses: every reason of every program's BTF is in one class of
// the table (reasonClasses), the Go side of bpf/lib/stage.h's sets. With
// RunVerdict, which checks each program run of the test tables against
// these classes, a reason that can leave a program with the wrong verdict
// fails a test.
func TestReasonClasses(t *testing.T) {
	loads := map[string]func() (*ebpf.CollectionSpec, error){
		"tc": loadTc, "xdp": loadXdp, "uplink": loadUplink, "tcuplink": loadTcuplink, "netkit": loadNetkit,
	}
	for name, load := range loads {
		spec, err := load()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var e *btf.Enum
		if err := spec.Types.TypeByName("xl_reason", &e); err != nil {
			t.Fatalf("%s: xl_reason: %v", name, err)
		}
		for _, v := range e.Values {
			if v.Name == "XL_REASON_MAX" {
				continue
			}
			if c := Reason(v.Value).Class(); c == ClassUnknown {
				t.Errorf("%s: %s is in no class of reasonClasses", name, v.Name)
			}
		}
	}
	for _, c := range []struct {
		typ  ebpf.ProgramType
		ret  uint32
		r    Reason
		want bool
	}{
		{ebpf.SchedCLS, retTCShot, tcXlReasonXL_DROP_SPOOFED, true},
		{ebpf.SchedCLS, retTCUnspec, tcXlReasonXL_DROP_SPOOFED, false},
		{ebpf.SchedCLS, retTCUnspec, tcXlReasonXL_PASS_TTL, true},
		{ebpf.SchedCLS, retTCRedirect, tcXlReasonXL_DROP_FW_REJECT, true},
		{ebpf.SchedCLS, retTCRedirect, tcXlReasonXL_DROP_FW, false},
		{ebpf.SchedCLS, retTCRedirect, tcXlReasonXL_DROP_TOO_BIG, true},
		{ebpf.SchedCLS, retTCShot, tcXlReasonXL_DROP_TOO_BIG, true},
		{ebpf.SchedCLS, retTCShot, tcXlReasonXL_FWD_PEER, false},
		{ebpf.XDP, retXDPPass, tcXlReasonXL_PASS_NO_TARGET, true},
		{ebpf.XDP, retXDPTX, tcXlReasonXL_DROP_FW_REJECT, true},
		{ebpf.XDP, retXDPPass, tcXlReasonXL_DROP_MALFORMED, false},
		{ebpf.XDP, retXDPRedirect, tcXlReasonXL_FWD_FIB, true},
	} {
		if got := verdictAgrees(c.typ, c.ret, c.r); got != c.want {
			t.Errorf("verdictAgrees(%v, %d, %s) = %v, want %v", c.typ, c.ret, c.r, got, c.want)
		}
	}
}
