package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/model"
)

// crictlVersion is the cri-tools release crictl is built from (Go module
// sigs.k8s.io/cri-tools), once, into the user's cache directory.
const crictlVersion = "v1.34.0"

// criHost is a private containerd (Debian's, with its CRI plugin) beside a
// node's xlaned, driven by crictl:
//
//	node netns: xlaned; containerd (own root, state, sockets, runc root,
//	            CNI conf and bin dirs: xlane-cni and loopback), so the
//	            machine's own containerd, if any, is not disturbed
//	pods:       sandboxes of a pause image built here (a static binary
//	            in an OCI archive, imported with ctr), their netns under
//	            containerd's state dir, their cgroups under a parent of
//	            the test's
//
// Everything is removed when the test ends: pods, containerd (by pid),
// processes left in the cgroup parent or naming the directory, mounts,
// cgroups, netns links, the directory.
type criHost struct {
	t      *testing.T
	n      *node
	dir    string // short: unix socket paths have a 108-byte limit
	sock   string
	cgroup string
	image  string
	crictl string
	cni    string // the CNI network's name
	cmd    *exec.Cmd
	exited chan struct{}
	log    *bytes.Buffer
	links  []string // /var/run/netns links to pods' namespaces
	opts   criOpts
}

// criOpts changes the containerd startCRIHostWith runs.
type criOpts struct {
	// conflist is the CNI configuration list (its "name" is replaced by
	// the host's own, unique one); nil: xlane-cni on the network "pods"
	// of 10.213.0.0/24 and fd00:213::/64.
	conflist map[string]any
	// mntns is a mount namespace containerd runs in (a /proc/PID/ns/mnt
	// path: a kubelet node's, shared with its kubelet); "": the
	// machine's. Pods' namespaces are then reached through their pause
	// process (/proc/PID/ns/net), as their pins are in mntns.
	mntns string
	// nodeCNI: containerd reads the CNI configuration and plugins where
	// a Kubernetes node's does, /etc/cni/net.d and /opt/cni/bin (of
	// mntns, where they are the node's own), and pins pods' namespaces
	// in /var/run/netns, where the DaemonSet's xlaned opens them. This
	// test writes no configuration there: the DaemonSet installs
	// xlane-cni and its configuration (conflist is not used).
	nodeCNI bool
}

func newCRIHost(t *testing.T) *criHost {
	t.Helper()
	return startCRIHost(t, newNode(t), nil)
}

// startCRIHost runs a private containerd beside node n's xlaned. conflist
// is the CNI configuration list (its "name" is replaced by the host's
// own, unique one); nil: xlane-cni on the network "pods" of
// 10.213.0.0/24 and fd00:213::/64.
func startCRIHost(t *testing.T, n *node, conflist map[string]any) *criHost {
	t.Helper()
	return startCRIHostWith(t, n, criOpts{conflist: conflist})
}

// startCRIHostWith is startCRIHost with opts: another mount namespace, a
// node's CNI directories.
func startCRIHostWith(t *testing.T, n *node, opts criOpts) *criHost {
	t.Helper()
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install Debian's containerd and runc (scripts/deps.sh does)", bin)
		}
	}
	crictl := crictlBinary(t)
	dir, err := os.MkdirTemp("", "xle-cri-")
	if err != nil {
		t.Fatal(err)
	}
	sfx := suffix()
	h := &criHost{t: t, dir: dir, sock: filepath.Join(dir, "c.sock"), cgroup: "xle-cri-" + sfx,
		image: "docker.io/xlane-e2e/pause:" + sfx, crictl: crictl, cni: "xlane-cri-" + sfx, log: &bytes.Buffer{}, opts: opts}
	h.n = n
	t.Cleanup(h.cleanup)
	h.writeConfig(opts.conflist)
	h.start()
	h.importImage(h.image, "github.com/xlane-dev/xlane/test/e2e/pause", "/pause")
	return h
}

// crictlBinary returns crictl, built from sigs.k8s.io/cri-tools at
// crictlVersion on first use (about two minutes) and cached outside the
// work tree. The module proxy serves it; the checksum database is not
// reachable here, so cri-tools' own zip is taken unverified (GONOSUMDB) and
// its dependencies are checked against its go.sum.
func crictlBinary(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "xlane-e2e", "crictl-"+crictlVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	dl := exec.Command("go", "mod", "download", "-json", "sigs.k8s.io/cri-tools@"+crictlVersion)
	dl.Dir = t.TempDir()
	dl.Env = append(os.Environ(), "GONOSUMDB=sigs.k8s.io/cri-tools", "GOFLAGS=")
	out, err := dl.Output()
	if err != nil {
		t.Fatalf("go mod download sigs.k8s.io/cri-tools@%s: %v\n%s", crictlVersion, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %q: %v", out, err)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-trimpath", "-o", bin+".tmp", "./cmd/crictl")
	build.Dir = mod.Dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build crictl: %v\n%s", err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

func (h *criHost) writeConfig(list map[string]any) {
	h.t.Helper()
	confDir, binDir2 := filepath.Join(h.dir, "net.d"), filepath.Join(h.dir, "bin")
	netnsUnderState := true
	if h.opts.nodeCNI {
		confDir, binDir2, netnsUnderState = "/etc/cni/net.d", "/opt/cni/bin", false
	} else {
		h.writeCNI(confDir, binDir2, list)
	}
	cri := `plugins."io.containerd.grpc.v1.cri"`
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[%[6]s]
  sandbox_image = %[7]q
  netns_mounts_under_state_dir = %[11]v
  # The sandbox's oom_score_adj (-998) is below what this process may set
  # where it lacks CAP_SYS_RESOURCE (runc fails in nsexec): clamp to ours.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [%[6]s.cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
  [%[6]s.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [%[6]s.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [%[6]s.containerd.runtimes.runc.options]
        Root = %[10]q
`, filepath.Join(h.dir, "root"), filepath.Join(h.dir, "state"), h.sock, h.sock+".ttrpc",
		filepath.Join(h.dir, "opt"), cri, h.image, binDir2, confDir, filepath.Join(h.dir, "runc"), netnsUnderState)
	if err := os.WriteFile(filepath.Join(h.dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		h.t.Fatal(err)
	}
	// crictl's own configuration (without one it looks beside its binary).
	crictlCfg := fmt.Sprintf("runtime-endpoint: unix://%[1]s\nimage-endpoint: unix://%[1]s\ntimeout: 60\n", h.sock)
	if err := os.WriteFile(filepath.Join(h.dir, "crictl.yaml"), []byte(crictlCfg), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// writeCNI puts the CNI configuration list (nil: xlane-cni on
// 10.213.0.0/24 and fd00:213::/64) in confDir and the plugins, xlane-cni
// and loopback, in binDir2.
func (h *criHost) writeCNI(confDir, binDir2 string, list map[string]any) {
	h.t.Helper()
	for _, d := range []string{confDir, binDir2} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			h.t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"xlane-cni": filepath.Join(binDir, "xlane-cni"), "loopback": filepath.Join(refPlugins, "loopback")} {
		if err := os.Symlink(target, filepath.Join(binDir2, name)); err != nil {
			h.t.Fatal(err)
		}
	}
	// containerd 1.6's CRI plugin speaks CNI up to 1.0.0.
	if list == nil {
		list = map[string]any{"cniVersion": "1.0.0", "plugins": []any{map[string]any{
			"type": "xlane-cni", "socket": h.n.socket, "network": "pods",
			"subnets": []string{"10.213.0.0/24", "fd00:213::/64"},
		}}}
	}
	list["name"] = h.cni
	b, _ := json.MarshalIndent(list, "", "  ")
	if err := os.WriteFile(filepath.Join(confDir, "10-xlane.conflist"), b, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// start runs containerd in the node's namespace and waits for its CRI.
func (h *criHost) start() {
	h.t.Helper()
	argv := []string{"containerd", "--config", filepath.Join(h.dir, "config.toml")}
	if h.opts.mntns != "" {
		argv = append([]string{"nsenter", "--mount=" + h.opts.mntns, "--"}, argv...)
	}
	h.cmd = inNS(h.n.netns, argv...)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		h.t.Fatalf("start containerd: %v", err)
	}
	h.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(h.cmd, h.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := h.crictlRun("info"); err == nil {
			return
		}
		select {
		case <-h.exited:
			h.t.Fatalf("containerd exited:\n%s", h.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.t.Fatalf("containerd's CRI did not come up:\n%s", tail(h.log.String(), 8<<10))
}

// stop ends the containerd this test started, by pid; pods keep running
// (their shims are their own processes).
func (h *criHost) stop() {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(30 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
	h.cmd = nil
}

func (h *criHost) cleanup() {
	if h.cmd != nil {
		h.crictlRun("rmp", "-fa")
		h.stop()
	}
	for _, pid := range leftoverPids(h.dir, h.cgroup) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	unmountUnder(h.dir)
	removeCgroups(h.cgroup)
	for _, l := range h.links {
		os.Remove(nsPath(l))
	}
	for _, f := range mustGlob(filepath.Join("/var/lib/cni/results", h.cni+"-*")) {
		os.Remove(f)
	}
	if err := os.RemoveAll(h.dir); err != nil {
		h.t.Errorf("remove %s: %v", h.dir, err)
	}
	// containerd 1.6 puts its shims' sockets in /run/containerd/s
	// whatever its state dir; they go with the shims. The directories go
	// too where nothing else uses them (Remove fails on a non-empty one).
	os.Remove("/run/containerd/s")
	os.Remove("/run/containerd")
	if h.t.Failed() {
		h.t.Logf("containerd log (last 8 KiB):\n%s", tail(h.log.String(), 8<<10))
	}
}

func mustGlob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}

func (h *criHost) crictlRun(args ...string) (string, error) {
	cmd := exec.Command(h.crictl, args...)
	cmd.Env = append(os.Environ(), "CRI_CONFIG_FILE="+filepath.Join(h.dir, "crictl.yaml"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (h *criHost) mustCrictl(args ...string) string {
	h.t.Helper()
	out, err := h.crictlRun(args...)
	if err != nil {
		h.t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// importImage builds the command pkg static, puts it in an OCI image
// archive named ref (its entrypoint at path) and imports that into
// containerd's k8s.io namespace (no registry: the test is offline). The
// pause image of the sandboxes is one.
func (h *criHost) importImage(ref, pkg, path string) {
	h.t.Helper()
	bin := filepath.Join(h.dir, filepath.Base(path))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		h.t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		h.t.Fatal(err)
	}
	archive := ociArchive(h.t, ref, path, exe)
	path = bin + ".tar"
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.importArchive(path)
}

// importArchive imports an image archive (OCI or docker save) into
// containerd's k8s.io namespace, under the names it carries.
func (h *criHost) importArchive(path string) {
	h.t.Helper()
	if out, err := exec.Command("ctr", "--address", h.sock, "-n", "k8s.io", "images", "import", path).CombinedOutput(); err != nil {
		h.t.Fatalf("ctr images import %s: %v\n%s", path, err, out)
	}
}

// ociArchive is an OCI image layout, tarred: one layer holding exe at path
// (its entrypoint), for linux/amd64, named ref.
func ociArchive(t *testing.T, ref, path string, exe []byte) []byte {
	t.Helper()
	return ociImage(t, ref, map[string]any{"Entrypoint": []string{path}}, tarLayer(map[string][]byte{path: exe}))
}

// tarLayer is a layer of executables (path -> content, mode 0755).
func tarLayer(files map[string][]byte) []byte {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, path := range slices.Sorted(maps.Keys(files)) {
		lw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path, "/"), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(files[path]))})
		lw.Write(files[path])
	}
	lw.Close()
	return layer.Bytes()
}

// ociImage is an OCI image layout, tarred, for linux/amd64, named ref:
// the layers (uncompressed tars) in order, config the image
// configuration's "config" (Entrypoint, Env, ...).
func ociImage(t *testing.T, ref string, config map[string]any, layers ...[]byte) []byte {
	t.Helper()
	blobs := map[string][]byte{}
	desc := func(mediaType string, b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	var layerDescs []any
	var diffIDs []string
	for _, l := range layers {
		d := desc("application/vnd.oci.image.layer.v1.tar", l)
		layerDescs = append(layerDescs, d)
		diffIDs = append(diffIDs, d["digest"].(string))
	}
	imageConfig, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": config,
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", imageConfig),
		"layers": layerDescs,
	})
	md := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:]}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	file := func(name string, b []byte) {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))})
		tw.Write(b)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for d, b := range blobs {
		file("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	tw.Close()
	return out.Bytes()
}

// pod is a running pod sandbox.
type pod struct {
	id    string
	netns string // a /var/run/netns name linked to its namespace
	ips   []netip.Addr
}

// runp starts a pod sandbox named name and reads its addresses and netns.
func (h *criHost) runp(name string) pod {
	h.t.Helper()
	cfg, _ := json.Marshal(map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "xle", "uid": name + "-" + suffix(), "attempt": 0},
		"log_directory": filepath.Join(h.dir, "logs", name),
		"linux":         map[string]any{"cgroup_parent": "/" + h.cgroup},
	})
	path := filepath.Join(h.dir, name+".json")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		h.t.Fatal(err)
	}
	p := pod{id: h.mustCrictl("runp", path)}
	return h.inspect(p)
}

func (h *criHost) inspect(p pod) pod {
	h.t.Helper()
	var st struct {
		Status struct {
			State   string
			Network struct {
				IP            string
				AdditionalIPs []struct{ IP string } `json:"additionalIps"`
			}
		}
		Info struct {
			Pid         int
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string }
				}
			}
		}
	}
	out := h.mustCrictl("inspectp", "-o", "json", p.id)
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		h.t.Fatalf("inspectp %s: %v\n%s", p.id, err, out)
	}
	if st.Status.State != "SANDBOX_READY" {
		h.t.Fatalf("pod %s is %s", p.id, st.Status.State)
	}
	p.ips = nil
	for _, s := range append([]string{st.Status.Network.IP}, func() (o []string) {
		for _, a := range st.Status.Network.AdditionalIPs {
			o = append(o, a.IP)
		}
		return
	}()...) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			h.t.Fatalf("pod %s address %q", p.id, s)
		}
		p.ips = append(p.ips, a)
	}
	for _, ns := range st.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && p.netns == "" {
			p.netns = "xle-pod-" + suffix()
			h.links = append(h.links, p.netns)
			path := ns.Path
			if h.opts.mntns != "" {
				// Pinned in containerd's mount namespace: the pause
				// process's is the same.
				if st.Info.Pid <= 0 {
					h.t.Fatalf("pod %s: no pid in %s", p.id, out)
				}
				path = fmt.Sprintf("/proc/%d/ns/net", st.Info.Pid)
			}
			if err := os.Symlink(path, nsPath(p.netns)); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	if p.netns == "" {
		h.t.Fatalf("pod %s has no network namespace in %s", p.id, out)
	}
	return p
}

// TestCRI creates and deletes pod sandboxes through containerd's CRI
// plugin and xlane-cni, with crictl: pods get an IPv4 and an IPv6 address
// from the network, reach each other (SHA-256-checked TCP), survive a
// containerd restart (and a new pod can be made after it), and their
// deletion removes their xlane endpoints and devices.
func TestCRI(t *testing.T) {
	h := newCRIHost(t)
	pods := []pod{h.runp("p1"), h.runp("p2")}
	check := func(p pod) {
		t.Helper()
		if len(p.ips) != 2 || !netip.MustParsePrefix("10.213.0.0/24").Contains(p.ips[0]) || !netip.MustParsePrefix("fd00:213::/64").Contains(p.ips[1]) {
			t.Fatalf("pod %s addresses %v, want one in 10.213.0.0/24 and one in fd00:213::/64", p.id, p.ips)
		}
		ep, err := h.n.client().Attachment(context.Background(), p.id, "eth0")
		if err != nil || ep.State != "ready" || ep.Attachment.CNINetwork != h.cni {
			t.Fatalf("pod %s's attachment: %+v %v", p.id, ep, err)
		}
	}
	for _, p := range pods {
		check(p)
	}
	transfer(t, pods[0].netns, pods[1].netns, pods[1].ips[0], 1<<20)
	transfer(t, pods[1].netns, pods[0].netns, pods[0].ips[1], 1<<20)

	t.Run("containerd restart", func(t *testing.T) {
		h.stop()
		h.start()
		for i, p := range pods {
			if got := h.inspect(p); !slices.Equal(got.ips, p.ips) {
				t.Errorf("pod %s after restart: %v, was %v", p.id, got.ips, p.ips)
			}
			pods[i] = p
		}
		p3 := h.runp("p3")
		check(p3)
		pods = append(pods, p3)
		transfer(t, p3.netns, pods[0].netns, pods[0].ips[0], 1<<20)
	})

	t.Run("delete", func(t *testing.T) {
		for _, p := range pods {
			ep, err := h.n.client().Attachment(context.Background(), p.id, "eth0")
			if err != nil {
				t.Fatal(err)
			}
			h.mustCrictl("stopp", p.id)
			h.mustCrictl("rmp", p.id)
			if _, err := h.n.client().Endpoint(context.Background(), model.AttachmentID(p.id, "eth0")); err == nil {
				t.Errorf("pod %s removed, its endpoint is still there", p.id)
			}
			if out, err := inNS(h.n.netns, "ip", "link", "show", ep.HostIf).CombinedOutput(); err == nil {
				t.Errorf("pod %s removed, its host device is still there: %s", p.id, out)
			}
		}
		eps, err := h.n.client().Endpoints(context.Background(), "")
		if err != nil || len(eps) != 0 {
			t.Errorf("endpoints left: %+v %v", eps, err)
		}
	})
}
