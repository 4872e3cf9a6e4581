package bpf

import (
	"sort"
	"testing"

	"github.com/cilium/ebpf"
)

// verifierLimit is the kernel's budget of processed instructions per
// program (BPF_COMPLEXITY_LIMIT_INSNS), the same on every kernel of the
// matrix.
const verifierLimit = 1_000_000

// TestVerifierHeadroom logs how many instructions the verifier processed
// for each program on this kernel and fails past 90 % of the limit: every
// new stage adds to the tc and netkit pipelines, and 6.1's verifier explores
// them several times more than 6.18's, so the matrix's 6.1 leg sees the
// wall coming before a program stops loading there.
//
// The programs are loaded as on a node of a cluster (Options.Cluster), the
// most a verifier explores: a node alone's verifier prunes the overlay's
// code (xl_cluster).
func TestVerifierHeadroom(t *testing.T) {
	objs := ObjectsFor(t, "", Options{Cluster: true})
	progs := map[string]*ebpf.Program{
		"xlane_from_endpoint": objs.XlaneFromEndpoint, "xlane_to_endpoint": objs.XlaneToEndpoint,
		"xlane_xdp_from_endpoint": objs.xdp.FromEndpoint, "xlane_xdp_generic_from_endpoint": objs.xdp.GenericFromEndpoint,
		"xlane_xdp_from_uplink": objs.fromUplink, "xlane_xdp_generic_from_uplink": objs.genUplink,
		"xlane_from_uplink": objs.tcFromUplink,
	}
	if nk, err := objs.LoadNetkit(); err == nil {
		defer nk.Close()
		progs["xlane_nk_from_endpoint"], progs["xlane_nk_to_endpoint"] = nk.FromEndpoint, nk.ToEndpoint
	} else {
		t.Errorf("netkit programs: %v", err)
	}
	names := make([]string, 0, len(progs))
	for n := range progs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := progs[n]
		if p == nil {
			continue // the XDP programs where the verifier refuses them: XDPErr's tests
		}
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, ok := info.VerifiedInstructions()
		if !ok {
			t.Logf("%s: this kernel does not report verified instructions", n)
			continue
		}
		t.Logf("%-32s %7d verified instructions (%2.0f %% of the limit)", n, insns, 100*float64(insns)/verifierLimit)
		if insns > verifierLimit*9/10 {
			t.Errorf("%s: %d verified instructions, over 90 %% of the verifier's %d: the next stage will not load on this kernel", n, insns, verifierLimit)
		}
	}
}
