package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// k8sBins returns the directory of the Kubernetes binaries named
// (XLANE_K8S_BIN, which make sets, or scripts/k8s-bins.sh: built from
// k8s.io/kubernetes once per machine and cached under /var/cache/xlane/k8s;
// the first run builds them, which takes many minutes).
func k8sBins(t *testing.T, bins ...string) string {
	t.Helper()
	if dir := os.Getenv("XLANE_K8S_BIN"); dir != "" {
		for _, b := range bins {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				t.Fatalf("XLANE_K8S_BIN=%s: %v", dir, err)
			}
		}
		return dir
	}
	cmd := exec.Command("../../scripts/k8s-bins.sh", bins...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/k8s-bins.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
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
}

// cpOptions changes the control plane startControlPlane makes.
type cpOptions struct {
	serviceCIDR string   // --service-cluster-ip-range; "": 10.96.0.0/16
	kubelets    []string // node names that get a kubelet identity
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
// service range, identities for kubelets.
func startControlPlaneWith(t *testing.T, bins, netns, addr string, opts cpOptions) *controlPlane {
	t.Helper()
	if opts.serviceCIDR == "" {
		opts.serviceCIDR = "10.96.0.0/16"
	}
	cp := &controlPlane{netns: netns, addr: addr, dir: t.TempDir(), token: suffix() + suffix(), kubelets: map[string]string{}}
	runIn(t, netns, "ip", "link", "set", "lo", "up")
	etcd := startProc(t, "etcd", netns, filepath.Join(bins, "xlane-etcd"), "--data-dir", filepath.Join(cp.dir, "etcd"),
		"--client-url", "http://127.0.0.1:2379", "--peer-url", "http://127.0.0.1:2380")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sa := filepath.Join(cp.dir, "sa.pem")
	writeFile(t, sa, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	tokens := filepath.Join(cp.dir, "tokens.csv")
	saToken := suffix() + suffix()
	users := cp.token + ",admin,admin,system:masters\n" +
		saToken + ",system:serviceaccount:kube-system:xlane,xlane,system:serviceaccounts\n"
	for _, name := range opts.kubelets {
		tok := suffix() + suffix()
		users += fmt.Sprintf("%s,system:node:%s,node-%s,system:nodes\n", tok, name, name)
		cp.kubelets[name] = filepath.Join(cp.dir, "kubelet-"+name+".kubeconfig")
		writeKubeconfig(t, cp.kubelets[name], addr, tok)
	}
	writeFile(t, tokens, []byte(users))
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(etcd.String(), "ready") {
		if time.Now().After(deadline) || etcd.cmd.ProcessState != nil {
			t.Fatalf("etcd did not start:\n%s", etcd)
		}
		time.Sleep(100 * time.Millisecond)
	}
	apiserver := startProc(t, "kube-apiserver", netns, filepath.Join(bins, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--advertise-address="+addr, "--bind-address="+addr, "--secure-port=6443",
		"--cert-dir="+filepath.Join(cp.dir, "certs"),
		"--service-cluster-ip-range="+opts.serviceCIDR,
		// Node: the kubelets' identities (system:node:NAME).
		"--authorization-mode=Node,RBAC",
		"--token-auth-file="+tokens,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+sa, "--service-account-signing-key-file="+sa,
		// No controller manager makes the service accounts a pod
		// would need.
		"--disable-admission-plugins=ServiceAccount",
		"--enable-priority-and-fairness=false",
		"--v=0")
	cp.kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	writeKubeconfig(t, cp.kubeconfig, addr, saToken)
	cp.admin = filepath.Join(cp.dir, "admin.kubeconfig")
	writeKubeconfig(t, cp.admin, addr, cp.token)
	// The test's own client dials from the control plane's namespace.
	rc := &rest.Config{Host: "https://" + addr + ":6443", BearerToken: cp.token, QPS: 200, Burst: 400,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			var c net.Conn
			err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, address)
				return err
			})
			return c, err
		}}
	if cp.cs, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		body, err := cp.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && string(body) == "ok" {
			break
		}
		if time.Since(start) > 3*time.Minute || apiserver.cmd.ProcessState != nil {
			t.Fatalf("kube-apiserver not ready after %v: %v %s", time.Since(start), err, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	applyManifest(t, cp.cs, "../../deploy/kubernetes/rbac.yaml")
	return cp
}

// writeKubeconfig writes a kubeconfig for the API server at addr:6443
// with a bearer token.
func writeKubeconfig(t *testing.T, path, addr, token string) {
	t.Helper()
	writeFile(t, path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://%s:6443
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, addr, token)))
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// applyManifest creates the ServiceAccounts, ClusterRoles and
// ClusterRoleBindings of a YAML file.
func applyManifest(t *testing.T, cs *kubernetes.Clientset, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, doc := range strings.Split(string(raw), "\n---") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: %T: not applied by this test", path, obj)
		}
		if err != nil {
			t.Fatalf("%s: create %T: %v", path, obj, err)
		}
	}
}
