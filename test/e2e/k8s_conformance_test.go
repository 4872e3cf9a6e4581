package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/test/k8senv"
)

// e2eSuites are the suites of Kubernetes' own e2e tests (e2e.test, built
// from k8s.io/kubernetes at the cluster's version) that
// TestKubernetesConformance runs, in order: ginkgo focus and skip
// regular expressions over the specs' full names.
var e2eSuites = []struct {
	name, focus, skip string
}{
	// The 45 sig-network specs of the Conformance profile
	// (test/conformance/testdata/conformance.yaml).
	{"sig-network-conformance", `\[sig-network\].*\[Conformance\]`, ""},
	// The NetworkPolicy suite, the netpol package
	// (test/e2e/network/netpol): the reachability matrix specs
	// ([Feature:NetworkPolicy], over TCP and UDP, and the two checking
	// that a policy of SCTP ports does not open TCP) and the two
	// NetworkPolicy API specs ("Netpol API"). The three
	// [Feature:SCTPConnectivity] specs send SCTP between pods: they are
	// left out where the kernel has no SCTP sockets (sctpSkip).
	{"netpol", `\[sig-network\] Netpol`, sctpSkip},
}

// TestKubernetesConformance runs Kubernetes' own network e2e suites
// (e2eSuites: the sig-network Conformance specs and the NetworkPolicy
// suite) against xlane installed as a user would (deploy/kubernetes, the
// DaemonSet, as TestKubernetesDaemonSet) on the two-node cluster of the
// cluster tests, with what the suites need beside it: every controller of
// the controller manager, kube-scheduler, CoreDNS as the kube-dns Service
// (built from its Go module, scripts/k8s-coredns.sh), kubelets with the
// cluster DNS and their API open to the API server, routes from the
// control plane's namespace to the pods' prefixes (the API server proxies
// to pods), and the test images imported into each node's containerd
// under the names e2e.test asks for (`e2e.test --list-images`; no
// registry here: e2eImages builds them).
//
//	  test pods                      test pods
//	  coredns, xlane-XXXXX           xlane-YYYYY
//	n1: containerd, kubelet        n2: containerd, kubelet     192.168.78.I/24
//	    | ul0                          | ul0
//	    +------------- br0 ------------+
//	                    |
//	cp: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
//	    ginkgo -p e2e.test (192.168.78.100; routes to the pod prefixes)
//
// e2e.test runs under the ginkgo CLI (XLANE_CONFORMANCE_PROCS parallel
// processes, default 4; [Serial] specs alone at the end), focused on each
// suite in turn; XLANE_CONFORMANCE_FOCUS replaces the suites by one of
// that focus. Each suite writes, under XLANE_CONFORMANCE_RESULTS
// (default: a new directory under /var/cache/xlane/conformance), its
// ginkgo output (NAME.log), its JUnit report (NAME.xml) and a summary of
// one line per spec (NAME.txt: PASS, FAIL or SKIP, the duration, the
// spec), and timings.txt the time of each phase. The test fails on any
// failed spec, listing each with its message. Not part of `make test`:
// `make test-k8s-conformance` (scripts/k8s-conformance.sh) runs it.
func TestKubernetesConformance(t *testing.T) {
	began := time.Now()
	results := os.Getenv("XLANE_CONFORMANCE_RESULTS")
	if results == "" {
		results = filepath.Join("/var/cache/xlane/conformance", time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("results in %s", results)
	phase := phaseClock(t, filepath.Join(results, "timings.txt"))

	bins := k8sBins(t, "kube-apiserver", "xlane-etcd", "kubelet", "kube-controller-manager", "kube-scheduler",
		"kubectl", "e2e.test", "ginkgo", "agnhost")
	phase("Kubernetes binaries (scripts/k8s-bins.sh; cached after the first build)")

	objs, cm, ds := deployObjects(t)
	images := append(e2eImages(t, bins), xlaneImage(t, daemonSetImage(t, ds)))
	phase("images built (agnhost, jessie-dnsutils, busybox, nginx, pause, CoreDNS, xlane)")

	kc := startKubeClusterWith(t, bins, cm.Data["cluster-cidr"], clusterOpts{daemonSet: true, allControllers: true})
	cp := kc.cp
	cm.Data["k8s-api-server"] = cp.addr + ":6443"
	cm.Data["uplink"] = "ul0"
	var nodes []*kubeletNode
	for i := 1; i <= 2; i++ {
		nodes = append(nodes, startKubeletNode(t, bins, cp, kc.ul, i, "docker.io/xlane-e2e/podserver:"+suffix(),
			kubeletOpts{daemonSet: true, images: images, e2e: true}))
	}
	t.Cleanup(func() { saveNodeLogs(t, nodes, results) })
	ctx := context.Background()
	if err := k8senv.Create(ctx, cp.cs, objs...); err != nil {
		t.Fatalf("apply deploy/kubernetes: %v", err)
	}
	waitDaemonSet(t, cp, ds, len(nodes))
	kc.waitNodes(t, nodes, began)
	// The control plane's namespace routes the nodes' pod prefixes to
	// them, as the network of a cluster whose API server is off the pods'
	// network does: the API server proxies to pods (pods/proxy,
	// services/proxy), which the DNS and Proxy specs read through.
	for _, k := range nodes {
		n, err := cp.cs.CoreV1().Nodes().Get(ctx, k.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Spec.PodCIDRs {
			if !strings.Contains(c, ":") {
				runIn(t, kc.cpNS, "ip", "route", "add", c, "via", k.addr4.String())
			}
		}
	}
	deployCoreDNS(t, cp, nodes)
	phase("cluster up (control plane, two nodes, the xlane DaemonSet Ready, CoreDNS Ready)")

	if os.Getenv("XLANE_CONFORMANCE_FOCUS") == cnpSuite {
		runCNPConformance(t, kc, results)
		phase("suite " + cnpSuite)
		return
	}
	procs := 4
	if s := os.Getenv("XLANE_CONFORMANCE_PROCS"); s != "" {
		var err error
		if procs, err = strconv.Atoi(s); err != nil || procs < 1 {
			t.Fatalf("XLANE_CONFORMANCE_PROCS=%q: want a positive number", s)
		}
	}
	suites := e2eSuites
	if f := os.Getenv("XLANE_CONFORMANCE_FOCUS"); f != "" {
		suites = suites[:0:0]
		suites = append(suites, struct{ name, focus, skip string }{"focus", f, ""})
	}
	for _, s := range suites {
		if s.skip == sctpSkip {
			if err := sctpSockets(); err == nil {
				s.skip = ""
			} else {
				t.Logf("suite %s: without the SCTP specs (%s): this kernel has no SCTP sockets: %v", s.name, sctpSkip, err)
			}
		}
		t.Run(s.name, func(t *testing.T) {
			runE2ESuite(t, bins, kc, s.name, s.focus, s.skip, procs, results)
			phase(fmt.Sprintf("suite %s (%d processes)", s.name, procs))
		})
	}
}

// sctpSkip skips the specs that send SCTP between pods.
const sctpSkip = `\[Feature:SCTPConnectivity\]`

// sctpSockets is nil where the kernel makes SCTP sockets (this machine's
// does not: built without CONFIG_IP_SCTP, and without modules).
func sctpSockets() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err != nil {
		return fmt.Errorf("socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP): %w", err)
	}
	syscall.Close(fd)
	return nil
}

// phaseClock returns a function that logs the time since its last call
// (the first: since now) with what was done, and appends it to file.
func phaseClock(t *testing.T, file string) func(what string) {
	last := time.Now()
	return func(what string) {
		d := time.Since(last).Round(time.Second)
		last = time.Now()
		t.Logf("phase: %v %s", d, what)
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(f, "%8v  %s\n", d, what)
		f.Close()
	}
}

// runE2ESuite runs e2e.test's specs matching focus (and not skip) with
// the ginkgo CLI in the control plane's namespace against the cluster,
// writes NAME.log, NAME.xml (JUnit) and NAME.txt (the summary) under
// results, and fails the test for every spec that failed.
func runE2ESuite(t *testing.T, bins string, kc *kubeCluster, name, focus, skip string, procs int, results string) {
	t.Helper()
	junit := filepath.Join(results, name+".xml")
	out := filepath.Join(results, name+".log")
	work := filepath.Join(results, name+"-output")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	args := []string{filepath.Join(bins, "ginkgo"), "--procs=" + strconv.Itoa(procs), "--timeout=80m", "--no-color", "--silence-skips",
		"--focus=" + focus, "--junit-report=" + junit}
	if skip != "" {
		args = append(args, "--skip="+skip)
	}
	args = append(args, filepath.Join(bins, "e2e.test"), "--",
		"--kubeconfig="+kc.cp.admin, "--provider=skeleton", "--kubectl-path="+filepath.Join(bins, "kubectl"),
		"--dns-domain=cluster.local", "--e2e-output-dir="+work, "--node-os-distro=debian",
		// The namespaces of failed specs stay for a look at what failed
		// (the cluster goes when the test ends).
		"--delete-namespace-on-failure=false")
	cmd := inNS(kc.cpNS, args...)
	cmd.Dir = work
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	runErr := cmd.Run()
	t.Logf("ginkgo %s: %v in %v (output in %s)", name, runErr, time.Since(start).Round(time.Second), out)
	specs, err := readJUnit(junit)
	if err != nil {
		b, _ := os.ReadFile(out)
		t.Fatalf("suite %s: %v; ginkgo: %v\n%s", name, err, runErr, tail(string(b), 8000))
	}
	summary := junitSummary(name, specs)
	if err := os.WriteFile(filepath.Join(results, name+".txt"), []byte(summary), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("suite %s:\n%s", name, summary)
	ran := 0
	for _, s := range specs {
		if s.state() == "FAIL" {
			t.Errorf("%s: %s", s.Name, firstLines(s.message(), 6))
		}
		if s.state() != "SKIP" {
			ran++
		}
	}
	if ran == 0 {
		t.Errorf("suite %s: no spec ran (focus %q)", name, focus)
	}
}

// junitCase is a testcase of ginkgo's JUnit report.
type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Body    string `xml:",chardata"`
	} `xml:"error"`
}

// state is PASS, FAIL or SKIP.
func (c junitCase) state() string {
	switch {
	case c.Failure != nil || c.Error != nil:
		return "FAIL"
	case c.Skipped != nil:
		return "SKIP"
	}
	return "PASS"
}

func (c junitCase) message() string {
	switch {
	case c.Failure != nil:
		return c.Failure.Message
	case c.Error != nil:
		return c.Error.Message
	case c.Skipped != nil:
		return c.Skipped.Message
	}
	return ""
}

// readJUnit reads the specs of a ginkgo JUnit report that were selected:
// the [It] specs, without those the focus left out (ginkgo reports them
// as skipped with the bare message "skipped"; a spec that skipped itself
// says why).
func readJUnit(file string) ([]junitCase, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var r struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var specs []junitCase
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			if !strings.HasPrefix(c.Name, "[It] ") || (c.Skipped != nil && c.Skipped.Message == "skipped") {
				continue
			}
			c.Name = withoutLabels(strings.TrimPrefix(c.Name, "[It] "))
			specs = append(specs, c)
		}
	}
	slices.SortFunc(specs, func(a, b junitCase) int { return strings.Compare(a.Name, b.Name) })
	return specs, nil
}

// withoutLabels is a JUnit spec name without the list of its labels
// ginkgo appends (" [sig-network, Conformance]") where the e2e framework
// has them in the name already ("[sig-network] ... [Conformance]").
func withoutLabels(name string) string {
	i := strings.LastIndex(name, " [")
	if i < 0 || !strings.HasSuffix(name, "]") {
		return name
	}
	for _, l := range strings.Split(name[i+2:len(name)-1], ", ") {
		if !strings.Contains(name[:i], "["+l+"]") {
			return name
		}
	}
	return name[:i]
}

// junitSummary is one line per spec (state, duration, name) under a line
// of counts.
func junitSummary(suite string, specs []junitCase) string {
	n := map[string]int{}
	var b strings.Builder
	for _, s := range specs {
		n[s.state()]++
		fmt.Fprintf(&b, "%s %7.1fs  %s\n", s.state(), s.Time, s.Name)
	}
	return fmt.Sprintf("# %s: %d specs, %d passed, %d failed, %d skipped\n", suite, len(specs), n["PASS"], n["FAIL"], n["SKIP"]) + b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}

// e2eImages builds the images the suites run, without a registry, as
// archives named as e2e.test asks for them (its --list-images: the
// registry.k8s.io names of k8s.io/kubernetes' test/utils/image at this
// version), for each node's containerd:
//
//   - agnhost: the test server, built from k8s.io/kubernetes'
//     test/images/agnhost at the cluster's version (scripts/k8s-bins.sh
//     agnhost), on a root file system of this machine's Debian packages
//     with the tools its Dockerfile installs from Alpine (a shell, dig,
//     curl, nc, ip; scripts/k8s-image-rootfs.sh), /uploads and the
//     porter's TLS certificate and key (the Proxy specs' https ports);
//   - jessie-dnsutils: the same root file system (dig, the DNS specs'
//     second querier);
//   - busybox: Debian's busybox-static, its applets linked in /bin;
//   - nginx: Debian's nginx-light (the EndpointSlice specs' pods run it);
//   - pause: test/e2e/pause (the framework's pods that only sleep);
//   - CoreDNS (registry.k8s.io/coredns/coredns, kubeadm's name):
//     scripts/k8s-coredns.sh's binary.
func e2eImages(t *testing.T, bins string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bins, "e2e.test"), "--list-images").Output()
	if err != nil {
		t.Fatalf("e2e.test --list-images: %v", err)
	}
	// agnhost -> registry.k8s.io/e2e-test-images/agnhost:2.56; nginx
	// has two tags (Nginx, NginxNew). The images of other registries
	// (gcr.io's authenticated ones, invalid.registry.k8s.io) are for
	// specs of registries, none of the suites'.
	names := map[string][]string{}
	for _, ref := range strings.Fields(string(out)) {
		if repo, _, _ := strings.Cut(ref, ":"); strings.HasPrefix(ref, "registry.k8s.io/") {
			names[path.Base(repo)] = append(names[path.Base(repo)], ref)
		}
	}
	refs := func(name string) []string {
		r, ok := names[name]
		if !ok {
			t.Fatalf("e2e.test --list-images names no registry.k8s.io %s image:\n%s", name, out)
		}
		return r
	}
	dir := t.TempDir()
	var archives []string
	add := func(refs []string, config map[string]any, layers ...[]byte) {
		for _, ref := range refs {
			p := filepath.Join(dir, fmt.Sprintf("image-%d.tar", len(archives)))
			writeFile(t, p, ociImage(t, ref, config, layers...))
			archives = append(archives, p)
		}
	}
	script := func(env []string, name string, args ...string) string {
		cmd := exec.Command("../../scripts/"+name, args...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scripts/%s: %v\n%s", name, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	readFile := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	path := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	passwd := tarTree([]tarEntry{
		{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n" +
			"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{name: "etc/group", body: "root:x:0:\nwww-data:x:33:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n"},
	})

	tools := readFile(script([]string{"XLANE_ROOTFS_CHECK=bash --version && dig -v && curl --version && nc -h 2>&1 | grep -q OpenBSD && ip -V && getent --version && seq 1 2"},
		"k8s-image-rootfs.sh", "base-files", "dash", "bash", "coreutils", "grep", "sed", "libc-bin",
		"bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iputils-ping", "wget"))
	// The porter's TLS certificate and key, which its Dockerfile adds
	// to / (its working directory): from the module's source.
	version := os.Getenv("XLANE_K8S_VERSION")
	if version == "" {
		version = "v1.34.4" // scripts/k8s-bins.sh's
	}
	dl, err := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+version).Output()
	if err != nil {
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v", version, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(dl, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download k8s.io/kubernetes@%s: %v %s", version, err, dl)
	}
	porter := filepath.Join(mod.Dir, "test/images/agnhost/porter")
	agnhostFiles := []tarEntry{
		{name: "agnhost", body: string(readFile(filepath.Join(bins, "agnhost"))), mode: 0o755},
		{name: "agnhost-2", link: "agnhost"},
		{name: "uploads/", mode: 0o755},
		{name: "localhost.crt", body: string(readFile(filepath.Join(porter, "localhost.crt")))},
		{name: "localhost.key", body: string(readFile(filepath.Join(porter, "localhost.key")))},
	}
	agnhostConfig := map[string]any{"Entrypoint": []string{"/agnhost"}, "Cmd": []string{"pause"}, "Env": []string{path}}
	add(refs("agnhost"), agnhostConfig, tools, passwd, tarTree(agnhostFiles))
	add([]string{cnpAgnhost}, agnhostConfig, tools, passwd, tarTree(cnpAgnhostFiles(agnhostFiles)))
	add(refs("jessie-dnsutils"), map[string]any{"Cmd": []string{"/bin/sh"}, "Env": []string{path}}, tools, passwd)

	bb := []tarEntry{{name: "bin/busybox", body: string(readFile("/bin/busybox")), mode: 0o755}, {name: "tmp/", mode: 0o1777}}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			bb = append(bb, tarEntry{name: "bin/" + a, link: "busybox"})
		}
	}
	add(refs("busybox"), map[string]any{"Cmd": []string{"sh"}, "Env": []string{path}}, tarTree(bb), passwd)

	nginx := readFile(script([]string{"XLANE_ROOTFS_CHECK=nginx -V"}, "k8s-image-rootfs.sh", "base-files", "dash", "nginx-light"))
	add(refs("nginx"), map[string]any{"Entrypoint": []string{"nginx", "-g", "daemon off;"}, "Env": []string{path}}, nginx, passwd)

	pauseBin := filepath.Join(dir, "pause")
	build := exec.Command("go", "build", "-o", pauseBin, "github.com/xlane-dev/xlane/test/e2e/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build test/e2e/pause: %v\n%s", err, out)
	}
	add(refs("pause"), map[string]any{"Entrypoint": []string{"/pause"}}, tarTree([]tarEntry{{name: "pause", body: string(readFile(pauseBin)), mode: 0o755}}))

	coredns := script(nil, "k8s-coredns.sh")
	add([]string{coreDNSImage}, map[string]any{"Entrypoint": []string{"/coredns"}},
		tarTree([]tarEntry{{name: "coredns", body: string(readFile(coredns)), mode: 0o755}, {name: "etc/coredns/", mode: 0o755}}))
	return archives
}

// coreDNSImage is CoreDNS's image as kubeadm v1.34 names it
// (scripts/k8s-coredns.sh builds that version).
const coreDNSImage = "registry.k8s.io/coredns/coredns:v1.12.1"

// tarEntry is a file (body, mode), a directory (name ending in /) or a
// symbolic link (link) of a layer.
type tarEntry struct {
	name, body, link string
	mode             int64
}

// tarTree is a layer of the entries, in order.
func tarTree(entries []tarEntry) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range entries {
		switch {
		case e.link != "":
			w.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeSymlink, Linkname: e.link, Mode: 0o777})
		case strings.HasSuffix(e.name, "/"):
			w.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeDir, Mode: e.mode})
		default:
			mode := e.mode
			if mode == 0 {
				mode = 0o644
			}
			w.WriteHeader(&tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(e.body))})
			w.Write([]byte(e.body))
		}
	}
	w.Close()
	return b.Bytes()
}

// deployCoreDNS deploys CoreDNS as a kubeadm cluster has it: the
// coredns service account and its role (read Services, EndpointSlices,
// Pods, Namespaces), the Corefile (the kubernetes plugin for
// cluster.local and the reverse zones, pods insecure, no forward: this
// machine has no upstream), a Deployment of two replicas and the kube-dns
// Service at e2eClusterDNS; it waits until both replicas are Ready.
func deployCoreDNS(t *testing.T, cp *controlPlane, nodes []*kubeletNode) {
	t.Helper()
	ctx := context.Background()
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	corefile := `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
    loadbalance
}
`
	if err := k8senv.Create(ctx, cp.cs,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}, Data: map[string]string{"Corefile": corefile}},
	); err != nil {
		t.Fatalf("CoreDNS: %v", err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: "coredns",
					DNSPolicy:          corev1.DNSDefault,
					// One per node, as kubeadm's anti-affinity prefers.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
					Containers: []corev1.Container{{
						Name: "coredns", Image: coreDNSImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/health", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10, FailureThreshold: 5},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/ready", Port: intstr.FromInt32(8181)}}, PeriodSeconds: 2},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
				},
			},
		},
	}
	if _, err := cp.cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("CoreDNS Deployment: %v", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: labels, ClusterIP: e2eClusterDNS, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}},
	}
	if _, err := cp.cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("kube-dns Service: %v", err)
	}
	start := time.Now()
	deadline := start.Add(3 * time.Minute)
	for {
		got, err := cp.cs.AppsV1().Deployments(ns).Get(ctx, "coredns", metav1.GetOptions{})
		if err == nil && got.Status.ReadyReplicas == 2 {
			break
		}
		if time.Now().After(deadline) {
			pods, _ := cp.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
			var b strings.Builder
			for _, p := range pods.Items {
				fmt.Fprintf(&b, "\n%s on %s: %s", p.Name, p.Spec.NodeName, podSummary(&p))
			}
			t.Fatalf("CoreDNS: not 2 replicas Ready after 3 min: %v%s", err, b.String())
		}
		time.Sleep(time.Second)
	}
	t.Logf("CoreDNS Ready (2 replicas) %v after its creation", time.Since(start).Round(time.Millisecond))
}

// saveNodeLogs copies the kube-system pods' logs (xlaned, CoreDNS) of
// every node to results/nodes/NODE/.
func saveNodeLogs(t *testing.T, nodes []*kubeletNode, results string) {
	for _, k := range nodes {
		logs, _ := filepath.Glob(filepath.Join(k.podLogs, "kube-system_*", "*", "*.log"))
		for _, l := range logs {
			rel, _ := filepath.Rel(k.podLogs, l)
			dst := filepath.Join(results, "nodes", k.name, strings.ReplaceAll(rel, "/", "_"))
			if b, err := os.ReadFile(l); err == nil && os.MkdirAll(filepath.Dir(dst), 0o755) == nil {
				os.WriteFile(dst, b, 0o644)
			}
		}
		if st, _, err := k.xlane("status"); err == nil {
			os.WriteFile(filepath.Join(results, "nodes", k.name+"-xlane-status.txt"), []byte(st), 0o644)
		}
	}
}

// TestConformanceSummary checks the reading of ginkgo's JUnit report
// (TestKubernetesConformance's summary) on a report of each state: a
// spec the focus left out is not listed, one that skipped itself is.
func TestConformanceSummary(t *testing.T) {
	report := `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5"><testsuite name="Kubernetes e2e suite" tests="5">
<testcase name="[SynchronizedBeforeSuite]" status="passed" time="1"></testcase>
<testcase name="[It] [sig-network] B spec [Conformance] [sig-network, Conformance]" status="failed" time="12.5"><failure message="wrong results&#xA;second line" type="failed">body</failure></testcase>
<testcase name="[It] [sig-network] A spec [Conformance] [sig-network, Conformance]" status="passed" time="3.25"></testcase>
<testcase name="[It] [sig-apps] left out [sig-apps]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-network] C spec [Feature:SCTPConnectivity] [sig-network, Feature:SCTPConnectivity, Other]" status="skipped" time="0.5"><skipped message="skipped - no SCTP"></skipped></testcase>
</testsuite></testsuites>`
	file := filepath.Join(t.TempDir(), "r.xml")
	writeFile(t, file, []byte(report))
	specs, err := readJUnit(file)
	if err != nil {
		t.Fatal(err)
	}
	got := junitSummary("s", specs)
	want := `# s: 3 specs, 1 passed, 1 failed, 1 skipped
PASS     3.2s  [sig-network] A spec [Conformance]
FAIL    12.5s  [sig-network] B spec [Conformance]
SKIP     0.5s  [sig-network] C spec [Feature:SCTPConnectivity] [sig-network, Feature:SCTPConnectivity, Other]
`
	if got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
	if m := specs[1].message(); m != "wrong results\nsecond line" {
		t.Errorf("failure message %q", m)
	}
}
