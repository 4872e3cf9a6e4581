// Package k8senv runs a real Kubernetes control plane for the tests
// (test/e2e) and the benchmarks (bench/k8s): xlane-etcd (etcd embedded) and
// kube-apiserver, built from k8s.io/kubernetes by scripts/k8s-bins.sh and
// cached under /var/cache/xlane/k8s, both in a network namespace the caller
// made, the API server on ADDR:6443 with RBAC and static tokens.
//
//	bins, err := k8senv.Bins(repoRoot, "kube-apiserver", "xlane-etcd")
//	cp, err := k8senv.Start(ctx, k8senv.Options{Bins: bins, Netns: "cp", Addr: "192.168.78.100", Dir: tmp})
//	defer cp.Stop()
//
// Nothing here is a fake: the clientset (ControlPlane.CS) talks to the real
// API server, dialling from inside its namespace.
package k8senv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// NetnsDir is where `ip netns add` names namespaces.
const NetnsDir = "/var/run/netns"

// Bins returns the directory holding the Kubernetes binaries named: the
// environment's XLANE_K8S_BIN (which make sets), checked, or what
// root/scripts/k8s-bins.sh prints (it builds what is missing, once per
// machine: many minutes the first time).
func Bins(root string, bins ...string) (string, error) {
	if dir := os.Getenv("XLANE_K8S_BIN"); dir != "" {
		for _, b := range bins {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("XLANE_K8S_BIN=%s: %w", dir, err)
			}
		}
		return dir, nil
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "k8s-bins.sh"), bins...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/k8s-bins.sh: %w\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Options says what control plane Start makes.
type Options struct {
	Bins        string   // holds kube-apiserver and xlane-etcd (Bins)
	Netns       string   // the namespace both run in (a name under NetnsDir)
	Addr        string   // the API server's address, one of Netns's
	Dir         string   // scratch: etcd's data, certificates, tokens, kubeconfigs
	ServiceCIDR string   // --service-cluster-ip-range; "": 10.96.0.0/16
	Kubelets    []string // node names that get a kubelet identity (system:node:NAME)
	// RBAC is a manifest of ServiceAccounts, ClusterRoles and bindings
	// applied once the API server is ready (deploy/kubernetes/rbac.yaml:
	// xlaned's identity, Kubeconfig); "": none.
	RBAC string
	// ServiceAccounts enables the ServiceAccount admission plugin: pods
	// get their service account's token (a projected volume the kubelet
	// fills through the TokenRequest API), and a pod is refused until its
	// service account exists. Without a controller manager running the
	// serviceaccount controller (every namespace's "default") and the
	// root CA publisher (--root-ca-file RootCA: the kube-root-ca.crt
	// ConfigMap the token volume holds), leave it off.
	ServiceAccounts bool
	// QPS of the clientset CS (default 200, burst twice that).
	QPS float32
	// APIServerArgs are more flags of kube-apiserver's, after the ones
	// Start gives.
	APIServerArgs []string
}

// ControlPlane is a running etcd + kube-apiserver.
type ControlPlane struct {
	Netns, Addr, Dir string
	Token            string // system:masters
	// Kubeconfig is xlaned's identity: the service account
	// kube-system/xlane as a static token (what RBAC grants it).
	Kubeconfig string
	Admin      string            // a kubeconfig of Token
	Kubelets   map[string]string // node name -> its kubelet's kubeconfig
	CS         *kubernetes.Clientset
	Dynamic    *dynamic.DynamicClient // as CS (JSON): custom resources, CRDs
	Ready      time.Duration          // from the API server's start to /readyz ok
	// RootCA holds the API server's self-signed serving certificate and
	// the CA that signed it (--cert-dir's apiserver.crt): the controller
	// manager's --root-ca-file, which pods get as their service account's
	// ca.crt.
	RootCA string

	procs         []*Proc
	apiserverArgv []string // nsenter --net=NETNS -- kube-apiserver FLAGS...
}

// Start starts etcd and kube-apiserver in o.Netns and waits until the API
// server is ready. On an error it stops what it started.
func Start(ctx context.Context, o Options) (_ *ControlPlane, err error) {
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	if o.QPS == 0 {
		o.QPS = 200
	}
	for field, v := range map[string]string{"Bins": o.Bins, "Netns": o.Netns, "Addr": o.Addr, "Dir": o.Dir} {
		if v == "" {
			return nil, fmt.Errorf("k8senv: Options.%s: empty", field)
		}
	}
	cp := &ControlPlane{Netns: o.Netns, Addr: o.Addr, Dir: o.Dir, Token: randomHex(8), Kubelets: map[string]string{}}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	if out, err := nsCommand(o.Netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lo up in %s: %w: %s", o.Netns, err, out)
	}
	etcd, err := cp.start("etcd", filepath.Join(o.Bins, "xlane-etcd"), "--data-dir", filepath.Join(o.Dir, "etcd"),
		"--client-url", "http://127.0.0.1:2379", "--peer-url", "http://127.0.0.1:2380")
	if err != nil {
		return nil, err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	sa := filepath.Join(o.Dir, "sa.pem")
	if err := writeFile(sa, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})); err != nil {
		return nil, err
	}
	tokens := filepath.Join(o.Dir, "tokens.csv")
	saToken := randomHex(8)
	users := cp.Token + ",admin,admin,system:masters\n" +
		saToken + ",system:serviceaccount:kube-system:xlane,xlane,system:serviceaccounts\n"
	for _, name := range o.Kubelets {
		tok := randomHex(8)
		users += fmt.Sprintf("%s,system:node:%s,node-%s,system:nodes\n", tok, name, name)
		cp.Kubelets[name] = filepath.Join(o.Dir, "kubelet-"+name+".kubeconfig")
		if err := WriteKubeconfig(cp.Kubelets[name], o.Addr, tok); err != nil {
			return nil, err
		}
	}
	if err := writeFile(tokens, []byte(users)); err != nil {
		return nil, err
	}
	if err := etcd.WaitOutput(ctx, "ready", 2*time.Minute); err != nil {
		return nil, err
	}
	// No controller manager makes the service accounts a pod would need,
	// unless the caller runs one.
	admission := "--disable-admission-plugins=ServiceAccount"
	if o.ServiceAccounts {
		admission = "--enable-admission-plugins=ServiceAccount"
	}
	certDir := filepath.Join(o.Dir, "certs")
	cp.RootCA = filepath.Join(certDir, "apiserver.crt")
	apiserver, err := cp.start("kube-apiserver", append([]string{filepath.Join(o.Bins, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--advertise-address=" + o.Addr, "--bind-address=" + o.Addr, "--secure-port=6443",
		"--cert-dir=" + certDir,
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		// Node: the kubelets' identities (system:node:NAME).
		"--authorization-mode=Node,RBAC",
		"--token-auth-file=" + tokens,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + sa, "--service-account-signing-key-file=" + sa,
		admission,
		// As kubeadm's clusters: the xlane DaemonSet's xlaned is
		// privileged.
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--v=0"}, o.APIServerArgs...)...)
	if err != nil {
		return nil, err
	}
	cp.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := WriteKubeconfig(cp.Kubeconfig, o.Addr, saToken); err != nil {
		return nil, err
	}
	cp.Admin = filepath.Join(o.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.Admin, o.Addr, cp.Token); err != nil {
		return nil, err
	}
	// The caller's client dials from the control plane's namespace.
	// Protobuf, as kube-proxy and the kubelet talk: JSON costs the API
	// server more per object.
	rc := &rest.Config{Host: "https://" + o.Addr + ":6443", BearerToken: cp.Token, QPS: o.QPS, Burst: int(2 * o.QPS),
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json"},
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			var c net.Conn
			err := ns.WithNetNSPath(filepath.Join(NetnsDir, o.Netns), func(ns.NetNS) error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, address)
				return err
			})
			return c, err
		}}
	if cp.CS, err = kubernetes.NewForConfig(rc); err != nil {
		return nil, err
	}
	drc := rest.CopyConfig(rc)
	drc.ContentConfig = rest.ContentConfig{}
	if cp.Dynamic, err = dynamic.NewForConfig(drc); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cp.waitReady(ctx, apiserver); err != nil {
		return nil, err
	}
	cp.Ready = time.Since(start)
	cp.apiserverArgv = apiserver.Cmd.Args
	if o.RBAC != "" {
		if err := ApplyManifest(ctx, cp.CS, o.RBAC); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// waitReady waits until the API server answers /readyz with ok (3
// minutes at most, or until it exits).
func (cp *ControlPlane) waitReady(ctx context.Context, apiserver *Proc) error {
	start := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		body, err := cp.CS.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		cancel()
		if err == nil && string(body) == "ok" {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > 3*time.Minute || apiserver.Exited() {
			return fmt.Errorf("kube-apiserver not ready after %v: %v %s\n%s", time.Since(start).Round(time.Millisecond), err, body, apiserver.Tail(4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// RestartAPIServer stops kube-apiserver (SIGTERM) and starts it again
// with the same flags, etcd left running, as an upgrade or a crash
// would; it returns once the new one is ready, with how long it was not
// serving (from the stop to /readyz ok).
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) (time.Duration, error) {
	i := slices.IndexFunc(cp.procs, func(p *Proc) bool { return p.Name == "kube-apiserver" })
	if i < 0 || cp.apiserverArgv == nil {
		return 0, errors.New("k8senv: no kube-apiserver to restart")
	}
	start := time.Now()
	// Busy with thousands of watches, it may not finish its graceful
	// shutdown within Stop's 10 s: killed then, as a crash would.
	if err := cp.procs[i].Stop(); err != nil && !cp.procs[i].Exited() {
		return 0, err
	}
	p, err := StartProc("kube-apiserver", cp.Netns, cp.apiserverArgv[3:]...)
	if err != nil {
		return 0, err
	}
	cp.procs[i] = p
	if err := cp.waitReady(ctx, p); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Stop stops the API server, then etcd (SIGTERM, SIGKILL after 10 s), by
// pid. It may be called more than once.
func (cp *ControlPlane) Stop() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		errs = append(errs, cp.procs[i].Stop())
	}
	cp.procs = nil
	return errors.Join(errs...)
}

// Logs returns the end of each process's output (n bytes each), for a
// failure's log.
func (cp *ControlPlane) Logs(n int) string {
	var b strings.Builder
	for _, p := range cp.procs {
		fmt.Fprintf(&b, "%s log:\n%s\n", p.Name, p.Tail(n))
	}
	return b.String()
}

func (cp *ControlPlane) start(name string, argv ...string) (*Proc, error) {
	p, err := StartProc(name, cp.Netns, argv...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// Proc is a process started in a network namespace (nsenter --net, which
// keeps /sys and bpffs visible, and execs: its pid is the command's), its
// output kept in memory.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Output is everything the process wrote so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Tail is the last n bytes of Output.
func (p *Proc) Tail(n int) string {
	out := p.Output()
	if len(out) > n {
		out = "...\n" + out[len(out)-n:]
	}
	return out
}

// StartProc starts argv in netns ("": here).
func StartProc(name, netns string, argv ...string) (*Proc, error) {
	p := &Proc{Name: name, done: make(chan struct{})}
	if netns != "" {
		p.Cmd = nsCommand(netns, argv...)
	} else {
		p.Cmd = exec.Command(argv[0], argv[1:]...)
	}
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	// Its own process group: a terminal's ^C reaches the caller, which
	// stops it in order.
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }()
	return p, nil
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitOutput waits until the output contains s; an error if the process
// exits first or timeout passes.
func (p *Proc) WaitOutput(ctx context.Context, s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Output(), s) {
		if p.Exited() {
			return fmt.Errorf("%s exited before saying %q:\n%s", p.Name, s, p.Tail(4000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not say %q in %v:\n%s", p.Name, s, timeout, p.Tail(4000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Stop sends SIGTERM to the pid, then SIGKILL after 10 s.
func (p *Proc) Stop() error {
	if p.Exited() {
		return nil
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	p.Cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for 10 s: killed", p.Name, p.Cmd.Process.Pid)
}

func nsCommand(netns string, argv ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + filepath.Join(NetnsDir, netns), "--"}, argv...)...)
}

// WriteKubeconfig writes a kubeconfig for the API server at addr:6443
// with a bearer token.
func WriteKubeconfig(path, addr, token string) error {
	return writeFile(path, []byte(fmt.Sprintf(`apiVersion: v1
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

func writeFile(path string, b []byte) error {
	return os.WriteFile(path, b, 0o600)
}

// ApplyManifest creates the objects of a YAML file (Decode, Create).
func ApplyManifest(ctx context.Context, cs *kubernetes.Clientset, path string) error {
	objs, err := Decode(path)
	if err != nil {
		return err
	}
	if err := Create(ctx, cs, objs...); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Decode reads the objects of a YAML file of documents separated by
// "---" lines.
func Decode(path string) ([]runtime.Object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	for _, doc := range strings.Split(string(raw), "\n---") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// Create creates ServiceAccounts, ClusterRoles, ClusterRoleBindings,
// Roles, RoleBindings, ConfigMaps and DaemonSets (what deploy/kubernetes
// holds), in order; any other kind is an error.
func Create(ctx context.Context, cs *kubernetes.Clientset, objs ...runtime.Object) error {
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("%T: not a kind Create creates", obj)
		}
		if err != nil {
			return fmt.Errorf("create %T: %w", obj, err)
		}
	}
	return nil
}

// Retry runs call, an API write, again while it fails with a transient
// error: the API server or its etcd timed out, was unavailable or throttled
// (under load, 20,000 creates draw "etcdserver: request timed out" now and
// then). After such a failure the write may have landed all the same, so
// AlreadyExists on a later try counts as success. client-go's
// retry.OnError does the backoff (6 tries, 200 ms doubling); it gives up
// early when ctx ends.
func Retry(ctx context.Context, call func() error) error {
	tries := 0
	return retry.OnError(wait.Backoff{Steps: 6, Duration: 200 * time.Millisecond, Factor: 2}, transient, func() error {
		if tries++; tries > 1 && ctx.Err() != nil {
			return ctx.Err()
		}
		err := call()
		if tries > 1 && apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		strings.Contains(err.Error(), "etcdserver: request timed out") || errors.Is(err, syscall.ECONNRESET)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
