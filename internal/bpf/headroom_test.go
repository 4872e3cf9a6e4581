package bpf

import (
	"sort"
	"testing"
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
	progs := objs.Programs() // every attach point's (inventory.go)
	for name, p := range NetkitFor(t, objs).Programs() {
		progs[name] = p
	}
	names := make([]string, 0, len(progs))
	for n := range progs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := progs[n]
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
