package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BuildBinaries builds xlaned and xlane from the module this harness is
// in, so the run is self-contained.
func BuildBinaries(ctx context.Context, dir string) error {
	gomod, err := Run(ctx, "go", "env", "GOMOD")
	gomod = strings.TrimSpace(gomod)
	if err != nil || gomod == "" || gomod == os.DevNull {
		return fmt.Errorf("run from inside the xlane module (go env GOMOD: %q, %v)", gomod, err)
	}
	root := filepath.Dir(gomod)
	for _, name := range []string{"xlaned", "xlane"} {
		log.Printf("go build %s", name)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
		}
	}
	return nil
}

// PrepareRun builds the binaries under test into tmp/bin and names the
// run: runID ("xlb-<random>") prefixes its namespaces and pin dirs, which
// the log line shows as runID-glob.
func PrepareRun(ctx context.Context, tmp, glob string) (bins, runID string, err error) {
	bins = filepath.Join(tmp, "bin")
	if err := BuildBinaries(ctx, bins); err != nil {
		return "", "", err
	}
	runID = "xlb-" + RandomHex(3)
	log.Printf("run %s: namespaces %s-%s, pin dirs /sys/fs/bpf/%s-%s", runID, runID, glob, runID, glob)
	return bins, runID, nil
}

// DescribeMachine describes the host; failures leave fields empty.
func DescribeMachine(ctx context.Context) Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), LoadStart: LoadAvg(),
		Kernel: KernelRelease(), CPUModel: CPUModel()}
	first := func(argv ...string) string {
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return "unknown"
		}
		l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return strings.TrimSpace(l)
	}
	m.GitCommit = first("git", "rev-parse", "--short", "HEAD")
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		if t := strings.TrimSpace(string(out)); t != "" {
			m.GitDirty = strings.Count(t, "\n") + 1
		}
	}
	m.Iperf3 = first("iperf3", "--version")
	m.Sockperf = "sockperf " + strings.TrimPrefix(first("sockperf", "--version"), "sockperf, ")
	return m
}

// KernelRelease is the running kernel's release ("" if unreadable).
func KernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// CPUModel is the first "model name" of /proc/cpuinfo ("" if none).
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Machine describes where the run happened.
type Machine struct {
	Kernel    string `json:"kernel"`
	NProc     int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
	GitCommit string `json:"git_commit"`
	GitDirty  int    `json:"git_modified_files"` // tracked files differing from HEAD
	GoVersion string `json:"go_version"`
	Iperf3    string `json:"iperf3"`
	Sockperf  string `json:"sockperf"`
}
