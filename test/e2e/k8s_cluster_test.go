package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/xlane-dev/xlane/test/k8senv"
)

// k8sBins returns the directory of the Kubernetes binaries named
// (test/k8senv.Bins: XLANE_K8S_BIN, which make sets, or
// scripts/k8s-bins.sh: built from k8s.io/kubernetes once per machine and
// cached under /var/cache/xlane/k8s; the first run builds them, which
// takes many minutes).
func k8sBins(t *testing.T, bins ...string) string {
	t.Helper()
	dir, err := k8senv.Bins("../..", bins...)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// controlPlane is a real kube-apiserver on an embedded etcd (xlane-etcd),
// both in their own network namespace, the API server listening on addr.
type controlPlane struct {
	netns      string
	addr       string // the API server's address (its namespace's)
	dir        string
	token      string // system:masters
	kubeconfig string // for xlaned, in the nodes' namespaces: xlane's service account
	// admin is a kubeconfig of the token above (the controller manager's).
	admin string
	// kubelets: each kubelet's kubeconfig, by node name (system:node:NAME
	// in system:nodes, authorized by the Node authorizer).
	kubelets map[string]string
	cs       *kubernetes.Clientset
	dyn      *dynamic.DynamicClient
	rootCA   string // the API server's certificate and CA (k8senv.ControlPlane.RootCA)
}

// cpOptions changes the control plane startControlPlane makes.
type cpOptions struct {
	serviceCIDR string   // --service-cluster-ip-range; "": 10.96.0.0/16
	kubelets    []string // node names that get a kubelet identity
	qps         float32  // the test's clientset; 0: k8senv's default
	// serviceAccounts: pods get their service account's token
	// (k8senv.Options.ServiceAccounts; the controller manager must run
	// the serviceaccount and root CA publisher controllers).
	serviceAccounts bool
	// noRBAC: deploy/kubernetes/rbac.yaml is not applied (the test
	// applies deploy/kubernetes itself).
	noRBAC        bool
	apiserverArgs []string // more kube-apiserver flags
}

// logProc is a process this test started, with its output kept for the
// failure log.
type logProc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
}

func (p *logProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *logProc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc starts args in netns and stops it (SIGTERM, then SIGKILL
// after 10 s), by pid, when the test ends; its output is logged if the
// test failed.
func startProc(t *testing.T, name, netns string, args ...string) *logProc {
	t.Helper()
	p := &logProc{name: name, cmd: inNS(netns, args...)}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			out := p.String()
			if len(out) > 20000 {
				out = "...\n" + out[len(out)-20000:]
			}
			t.Logf("%s log:\n%s", name, out)
		}
	})
	return p
}

// startControlPlane starts etcd and kube-apiserver in netns, the API
// server on addr:6443 (service CIDR 10.96.0.0/16, NodePorts 30000-32767,
// RBAC with a static admin token), and waits until it is ready. xlaned's
// kubeconfig is the identity deploy/kubernetes/rbac.yaml grants (the
// service account kube-system/xlane, as a static token), with that file's
// roles applied: xlaned gets no more than the DaemonSet would.
func startControlPlane(t *testing.T, bins, netns, addr string) *controlPlane {
	t.Helper()
	return startControlPlaneWith(t, bins, netns, addr, cpOptions{})
}

// startControlPlaneWith is startControlPlane with opts: a dual-stack
// service range, identities for kubelets. The control plane is
// test/k8senv's (the benchmarks run the same one); it is stopped when the
// test ends, its logs shown if the test failed.
func startControlPlaneWith(t *testing.T, bins, netns, addr string, opts cpOptions) *controlPlane {
	t.Helper()
	rbac := "../../deploy/kubernetes/rbac.yaml"
	if opts.noRBAC {
		rbac = ""
	}
	k, err := k8senv.Start(context.Background(), k8senv.Options{Bins: bins, Netns: netns, Addr: addr, Dir: t.TempDir(),
		ServiceCIDR: opts.serviceCIDR, Kubelets: opts.kubelets, QPS: opts.qps, RBAC: rbac, ServiceAccounts: opts.serviceAccounts, APIServerArgs: opts.apiserverArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(k.Logs(20000))
		}
		if err := k.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("kube-apiserver ready in %v", k.Ready.Round(time.Millisecond))
	return &controlPlane{netns: netns, addr: addr, dir: k.Dir, token: k.Token, kubeconfig: k.Kubeconfig, admin: k.Admin,
		kubelets: k.Kubelets, cs: k.CS, dyn: k.Dynamic, rootCA: k.RootCA}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
