package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/xlane-dev/xlane/internal/model"
	"github.com/xlane-dev/xlane/test/k8senv"
)

// TestKubernetesDaemonSet installs xlane on a real cluster as a user
// would: deploy/kubernetes/*.yaml (rbac, configmap, daemonset) created
// through the API, nothing of xlane on the nodes before, the DaemonSet's
// pods installing xlane-cni and its configuration and running xlaned,
// which becomes the nodes' network plugin and service proxy.
//
//	  web-n1 (pod)             web-n2 (pod)
//	  xlane-XXXXX (DaemonSet)  xlane-YYYYY (DaemonSet)
//	    |                        |
//	n1: containerd, kubelet  n2: containerd, kubelet    192.168.78.I/24
//	    (own mount ns)           (own mount ns)         fd00:78::I/64
//	    | ul0                    | ul0
//	    +--------- br0 ----------+
//	                |
//	cp: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
//
// What a user's cluster has and this one needs: the ServiceAccount
// admission plugin and the controller manager's DaemonSet, serviceaccount
// and root CA publisher controllers (the xlane pods' token and CA, which
// xlaned's in-cluster client uses), kube-scheduler (it binds the
// DaemonSet's pods), nodes whose /run/xlane, /var/lib/xlane, /opt/cni/bin
// (with the reference loopback plugin), /etc/cni/net.d, /var/run/netns and
// /sys/fs/bpf are their own (a mount namespace per node, shared by its
// containerd and kubelet: startKubeletNode), and the image, which without
// a registry is imported into each node's containerd (xlaneImage). What a
// user sets in the ConfigMap: the API server's address (no kube-proxy
// here, so the kubernetes ClusterIP is no way to reach it before xlaned
// runs) and the nodes' uplink; the pods' prefixes are the ConfigMap's, as
// the controller manager's --cluster-cidr.
//
// Checked: the DaemonSet's pods Ready on both nodes (their readiness
// probe runs `xlane status`); xlane-cni and the ConfigMap's configuration
// installed on each node; the Nodes Ready (the runtime found the CNI
// configuration) and each xlaned, reading the API server with the pod's
// service account token, has both as xlane nodes; pods on both nodes get
// addresses of both families through xlane-cni and talk across nodes
// (SHA-256-checked TCP, IPv4 and IPv6); a dual-stack ClusterIP Service
// reaches the pods of both nodes and carries checked transfers; n2's xlane
// pod deleted during a transfer from n1's pod to n2's: the DaemonSet
// replaces it, the transfer completes intact, the new xlaned adopts the
// running pods and serves the Service again.
func TestKubernetesDaemonSet(t *testing.T) {
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd", "kubelet", "kube-controller-manager", "kube-scheduler")
	began := time.Now()
	ctx := context.Background()

	objs, cm, ds := deployObjects(t)
	kc := startKubeCluster(t, bins, cm.Data["cluster-cidr"], true)
	cp := kc.cp
	cm.Data["k8s-api-server"] = cp.addr + ":6443"
	cm.Data["uplink"] = "ul0"

	archive := xlaneImage(t, daemonSetImage(t, ds))
	t.Logf("image %s built, %v after the start", daemonSetImage(t, ds), time.Since(began).Round(time.Millisecond))
	image := "docker.io/xlane-e2e/podserver:" + suffix()
	var nodes []*kubeletNode
	for i := 1; i <= 2; i++ {
		nodes = append(nodes, startKubeletNode(t, bins, cp, kc.ul, i, image, kubeletOpts{daemonSet: true, images: []string{archive}}))
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, k := range nodes {
			st, _, _ := k.xlane("status")
			t.Logf("%s: xlane status:\n%s", k.name, st)
			logs, _ := filepath.Glob(filepath.Join(k.podLogs, "kube-system_*", "*", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s: %s:\n%s", k.name, l, tail(string(b), 16<<10))
			}
		}
	})
	// The nodes are registered (the DaemonSet controller makes a pod for
	// each node there is) and have nothing of xlane.
	for _, k := range nodes {
		waitFor(t, 2*time.Minute, "node "+k.name+" registered", func() bool {
			_, err := cp.cs.CoreV1().Nodes().Get(ctx, k.name, metav1.GetOptions{})
			return err == nil
		})
		if _, err := os.Stat(k.socket); err == nil {
			t.Fatalf("%s: %s before the DaemonSet", k.name, k.socket)
		}
	}

	t.Logf("nodes registered, no xlane on them, %v after the start: applying deploy/kubernetes", time.Since(began).Round(time.Millisecond))
	if err := k8senv.Create(ctx, cp.cs, objs...); err != nil {
		t.Fatalf("apply deploy/kubernetes: %v", err)
	}
	applied := time.Now()
	xlanePods := waitDaemonSet(t, cp, ds, len(nodes))
	t.Logf("DaemonSet xlane: %d pods Ready %v after it was applied, %v after the start", len(xlanePods),
		time.Since(applied).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	for _, k := range nodes {
		if xlanePods[k.name] == nil {
			t.Fatalf("DaemonSet xlane: no pod on %s (%v)", k.name, xlanePods)
		}
		// What the init container installed, in the node's own
		// directories.
		if fi, err := os.Stat(filepath.Join(k.root, "opt/cni/bin/xlane-cni")); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: /opt/cni/bin/xlane-cni: %v %v", k.name, fi, err)
		}
		got, err := os.ReadFile(filepath.Join(k.root, "etc/cni/net.d/10-xlane.conflist"))
		if err != nil || string(got) != cm.Data["10-xlane.conflist"] {
			t.Errorf("%s: /etc/cni/net.d/10-xlane.conflist is %q (%v), the ConfigMap has %q", k.name, got, err, cm.Data["10-xlane.conflist"])
		}
	}
	kc.waitNodes(t, nodes, began)
	pods := startWebPods(t, cp, nodes, image, began)
	// The pods' network, made by the first pod's CNI ADD, runs the mode
	// the ConfigMap's configuration asks for: a BPF one (kernel mode
	// would leave Services untranslated: no kube-proxy here).
	var conf struct {
		Plugins []struct{ Mode string } `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(cm.Data["10-xlane.conflist"]), &conf); err != nil || len(conf.Plugins) == 0 {
		t.Fatalf("ConfigMap 10-xlane.conflist: %v", err)
	}
	for _, k := range nodes {
		var n model.Network
		k.mustXlane(&n, "network", "inspect", "pods")
		if string(n.Mode) != conf.Plugins[0].Mode || !n.Mode.BPF() {
			t.Errorf("%s: network pods runs mode %s (%s), the ConfigMap asks for %s", k.name, n.Mode, n.ModeReason, conf.Plugins[0].Mode)
		}
	}

	t.Run("pod to pod across nodes", func(t *testing.T) { podToPod(t, pods) })

	svc, vips := createWebService(t, cp, nodes)
	t.Run("clusterip", func(t *testing.T) {
		for _, vip := range vips {
			reachesBoth(t, pods[0].sbx.netns, vip)
		}
		for _, ip := range svc.Spec.ClusterIPs {
			sendChecked(t, pods[1].sbx.netns, netip.AddrPortFrom(netip.MustParseAddr(ip), 90), 8<<20, 0)()
		}
	})

	t.Run("xlane pod replaced under traffic", func(t *testing.T) {
		// What a rollout does to a node: its xlane pod deleted (xlaned
		// gets SIGTERM), a new one started by the DaemonSet. The
		// datapath, pinned in the node's bpffs, carries the pods'
		// traffic meanwhile and the new xlaned adopts it (paced: 12 MiB
		// at 4 MiB/s from n1's pod to n2's).
		old := xlanePods["n2"]
		wait := sendChecked(t, pods[0].sbx.netns, netip.AddrPortFrom(pods[1].ip4, 9090), 12<<20, 4<<20)
		time.Sleep(time.Second)
		if err := cp.cs.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete pod %s: %v", old.Name, err)
		}
		deleted := time.Now()
		var now map[string]*corev1.Pod
		waitFor(t, 2*time.Minute, "a new xlane pod Ready on n2", func() bool {
			now = daemonSetPods(t, cp, ds)
			p := now["n2"]
			return p != nil && p.UID != old.UID && podReady(p)
		})
		t.Logf("xlane pod %s replaced by %s, Ready %v after the deletion", old.Name, now["n2"].Name, time.Since(deleted).Round(time.Millisecond))
		wait()
		ep, err := pods[1].client().Attachment(ctx, pods[1].sbx.id, "eth0")
		if err != nil || ep.State != "ready" || ep.HostIf != pods[1].host {
			t.Errorf("n2's pod after the new xlaned: attachment %+v %v, want ready on %s", ep, err, pods[1].host)
		}
		waitService(t, nodes[1].node, "k8s.default.web.tcp80.c0", 2)
		reachesBoth(t, pods[1].sbx.netns, vips[1])
		sendChecked(t, pods[1].sbx.netns, netip.AddrPortFrom(pods[0].ip6, 9090), 4<<20, 0)()
		sendChecked(t, pods[0].sbx.netns, netip.AddrPortFrom(pods[1].ip4, 9090), 4<<20, 0)()
	})
	t.Logf("the DaemonSet test took %v", time.Since(began).Round(time.Millisecond))
}

// deployObjects reads deploy/kubernetes as `kubectl apply -f
// deploy/kubernetes/` does: every object, and among them the ConfigMap
// and the DaemonSet.
func deployObjects(t *testing.T) ([]runtime.Object, *corev1.ConfigMap, *appsv1.DaemonSet) {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/kubernetes/*.yaml: %v", err)
	}
	var objs []runtime.Object
	var cm *corev1.ConfigMap
	var ds *appsv1.DaemonSet
	for _, f := range files {
		o, err := k8senv.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *appsv1.DaemonSet:
			ds = o
		}
	}
	if cm == nil || ds == nil {
		t.Fatalf("deploy/kubernetes: no ConfigMap or no DaemonSet in %v", files)
	}
	return objs, cm, ds
}

// daemonSetImage is the image of the DaemonSet's containers (one for
// all), as they name it.
func daemonSetImage(t *testing.T, ds *appsv1.DaemonSet) string {
	t.Helper()
	ref := ""
	for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
		if ref != "" && c.Image != ref {
			t.Fatalf("DaemonSet: containers of two images, %s and %s", ref, c.Image)
		}
		ref = c.Image
	}
	return ref
}

// daemonSetPods returns the pods of ds by node name (not being deleted).
func daemonSetPods(t *testing.T, cp *controlPlane, ds *appsv1.DaemonSet) map[string]*corev1.Pod {
	t.Helper()
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	l, err := cp.cs.CoreV1().Pods(ds.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("list pods %s: %v", sel, err)
	}
	out := map[string]*corev1.Pod{}
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

// waitDaemonSet waits until ds has a Ready pod on each of n nodes and
// returns them by node.
func waitDaemonSet(t *testing.T, cp *controlPlane, ds *appsv1.DaemonSet, n int) map[string]*corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got, err := cp.cs.AppsV1().DaemonSets(ds.Namespace).Get(context.Background(), ds.Name, metav1.GetOptions{})
		pods := daemonSetPods(t, cp, ds)
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		if err == nil && got.Status.NumberReady == int32(n) && ready == n {
			return pods
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for node, p := range pods {
				fmt.Fprintf(&b, "\n%s on %s: %s", p.Name, node, podSummary(p))
			}
			st, _ := json.Marshal(got)
			t.Fatalf("DaemonSet %s: not %d pods Ready after 3 min: %v %s%s", ds.Name, n, err, st, b.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// xlaneImage builds the DaemonSet's image (deploy/kubernetes/Dockerfile)
// without a registry or Docker, as an OCI archive named ref (as the
// runtime names it: xlane:dev is docker.io/library/xlane:dev): the base
// layer scripts/k8s-image-rootfs.sh makes from this machine's Debian 12
// packages (what the Dockerfile's debian:12-slim and apt give: a shell,
// coreutils, nft, iptables; cached outside the work tree), then the static
// xlaned, xlane and xlane-cni in /usr/local/bin, xlaned the entrypoint.
func xlaneImage(t *testing.T, ref string) string {
	t.Helper()
	cmd := exec.Command("../../scripts/k8s-image-rootfs.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/k8s-image-rootfs.sh: %v\n%s", err, stderr.String())
	}
	base, err := os.ReadFile(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/xlane-dev/xlane/cmd/xlaned",
		"github.com/xlane-dev/xlane/cmd/xlane", "github.com/xlane-dev/xlane/cmd/xlane-cni")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the static binaries: %v\n%s", err, out)
	}
	files := map[string][]byte{}
	for _, b := range []string{"xlaned", "xlane", "xlane-cni"} {
		exe, err := os.ReadFile(filepath.Join(dir, b))
		if err != nil {
			t.Fatal(err)
		}
		files["/usr/local/bin/"+b] = exe
	}
	archive := ociImage(t, dockerRef(ref), map[string]any{
		"Entrypoint": []string{"xlaned"},
		"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}, base, tarLayer(files))
	path := filepath.Join(dir, "xlane-image.tar")
	writeFile(t, path, archive)
	return path
}

// dockerRef is an image reference as the runtime normalizes it: a name
// without a registry is Docker Hub's (docker.io), one without a path
// there is in library/.
func dockerRef(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found {
		return "docker.io/library/" + ref
	}
	if !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	return ref
}
