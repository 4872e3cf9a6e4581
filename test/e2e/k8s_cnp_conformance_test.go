package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// cnpSuite is the XLANE_CONFORMANCE_FOCUS that runs the upstream
// ClusterNetworkPolicy conformance suite (sigs.k8s.io/network-policy-api
// `conformance`, built by scripts/cnp-conformance.sh into
// XLANE_CNP_CONFORMANCE_BIN) instead of Kubernetes' own suites.
const cnpSuite = "network-policy-api"

// cnpAgnhost is the image the suite's pods run (its base manifests): the
// agnhost e2eImages builds, under this name, with cnpAgnhostFiles.
const cnpAgnhost = "registry.k8s.io/e2e-test-images/agnhost:2.45"

// cnpAgnhostFiles are agnhost's files with /agnhost a script in front of
// the binary (/agnhost-real) that drops the SERVE_SCTP_PORT_* variables
// of `agnhost porter`: every pod of the suite's base manifests runs two
// SCTP porters, which exit (log.Fatal) where the kernel has no SCTP
// sockets, as this machine's (CONFIG_IP_SCTP unset, no modules), so that
// no pod would ever be ready and no test would run. The SCTP tests fail
// here whatever the datapath does; the others run unchanged.
func cnpAgnhostFiles(files []tarEntry) []tarEntry {
	out := make([]tarEntry, 0, len(files)+1)
	for _, f := range files {
		if f.name == "agnhost" {
			out = append(out, tarEntry{name: "agnhost-real", body: f.body, mode: f.mode},
				tarEntry{name: "agnhost", mode: 0o755, body: "#!/bin/bash\n" +
					"# xlane e2e: this kernel has no SCTP; porter serves the other protocols\n" +
					"if [ \"$1\" = porter ] && ! [ -e /proc/net/sctp ]; then\n" +
					"\tfor v in $(env | sed -n 's/^\\(SERVE_SCTP_PORT_[^=]*\\)=.*/\\1/p'); do unset \"$v\"; done\n" +
					"fi\n" +
					"exec /agnhost-real \"$@\"\n"})
			continue
		}
		if f.link == "agnhost" {
			f.link = "agnhost-real"
		}
		out = append(out, f)
	}
	return out
}

// cnpFeatures are the suite's experimental features xlane claims.
const cnpFeatures = "ClusterNetworkPolicyNamedPorts,ClusterNetworkPolicyEgressNodePeers"

// runCNPConformance installs the ClusterNetworkPolicy CRD
// (deploy/kubernetes/crd, the release the suite checks by its
// bundle-version annotation) and runs the suite's
// TestConformanceProfiles for the ClusterNetworkPolicy profile from the
// control plane's namespace with the admin kubeconfig. It writes, under
// results, the suite's report (network-policy-api.yaml, the format of the
// upstream conformance/reports), its output (.log) and one line per test
// (.txt), and fails the test for every failed test.
func runCNPConformance(t *testing.T, kc *kubeCluster, results string) {
	t.Helper()
	bin := os.Getenv("XLANE_CNP_CONFORMANCE_BIN")
	if bin == "" {
		t.Fatalf("XLANE_CONFORMANCE_FOCUS=%s: XLANE_CNP_CONFORMANCE_BIN names no suite binary (scripts/cnp-conformance.sh builds it; scripts/k8s-conformance.sh sets it)", cnpSuite)
	}
	installCNPCRD(t, kc.cp)
	version, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		t.Fatalf("git describe: %v", err)
	}
	report := filepath.Join(results, cnpSuite+".yaml")
	logPath := filepath.Join(results, cnpSuite+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := inNS(kc.cpNS, bin, "-test.run", "^TestConformanceProfiles$", "-test.v", "-test.timeout", "90m",
		"--conformance-profiles=ClusterNetworkPolicy", "--supported-features="+cnpFeatures,
		"--organization=xlane-dev", "--project=xlane", "--url=https://github.com/xlane-dev/xlane",
		"--version="+strings.TrimSpace(string(version)), "--contact=https://github.com/xlane-dev/xlane/issues",
		"--additional-info=make test-k8s-conformance with XLANE_CONFORMANCE_FOCUS=network-policy-api (test/e2e TestKubernetesConformance: two kubelet nodes, xlane's DaemonSet)",
		"--report-output="+report)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kc.cp.admin)
	cmd.Dir = results
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("%s suite: %v in %v (output in %s)", cnpSuite, runErr, time.Since(start).Round(time.Second), logPath)
	summary, failed, err := cnpSummary(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(results, cnpSuite+".txt"), []byte(summary), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("%s:\n%s", cnpSuite, summary)
	for _, f := range failed {
		t.Errorf("failed: %s", f)
	}
	if _, err := os.Stat(report); err != nil {
		t.Errorf("no report: %v", err)
	}
	if runErr != nil && len(failed) == 0 {
		b, _ := os.ReadFile(logPath)
		t.Errorf("the suite failed (%v) with no failed test:\n%s", runErr, tail(string(b), 8000))
	}
}

// cnpResult is a `go test -v` result line of a subtest.
var cnpResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// cnpSummary reads the suite's output: one line per test (PASS, FAIL or
// SKIP, seconds, name), and the failed tests' names.
func cnpSummary(path string) (string, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	var b strings.Builder
	var failed []string
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := cnpResult.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		fmt.Fprintf(&b, "%s %8ss %s\n", m[1], m[3], m[2])
		n[m[1]]++
		if m[1] == "FAIL" && strings.Count(m[2], "/") >= 2 {
			failed = append(failed, m[2])
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped (subtests and parents)\n", n["PASS"], n["FAIL"], n["SKIP"])
	return b.String(), failed, sc.Err()
}
