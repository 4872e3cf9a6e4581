package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// dockerHost is a real dockerd for one test, beside the node's xlaned:
//
//	 outside netns                node netns (nsenter --net, so /sys and the
//	+--------------+             cgroup mounts stay visible to dockerd)
//	| out0 .2      |==== veth ===| dkup0 10.97.0.1    xlaned (Docker driver
//	| routes the   |             |                    on h.dir/xlane-docker.sock)
//	| container    |             | docker0 (Docker's  dockerd (own data-root,
//	| subnets back |             |  own bridge)       exec-root, API socket,
//	+--------------+             |                    pidfile, cgroup parent)
//	                             +--- xlh* veths --- containers (busybox)
//
// Docker finds the driver through a spec file /etc/docker/plugins/<name>.spec
// (name unique per test) naming xlaned's socket. Everything is removed when
// the test ends, failed or not: containers, dockerd (by pid), processes left
// in the test's cgroup parent, mounts under h.dir, the spec file, the
// namespaces.
type dockerHost struct {
	t        *testing.T
	n        *node
	dir      string // short: unix socket paths have a 108-byte limit
	driver   string // plugin name, as in docker network create -d
	plugin   string // xlaned's plugin socket
	spec     string
	sock     string // dockerd's API socket
	cgroup   string // --cgroup-parent
	cli      string
	cmd      *exec.Cmd
	exited   chan struct{}
	log      *bytes.Buffer
	image    string
	nsLinks  map[string]string // container name -> /var/run/netns link name
	ctrNames []string
}

func newDockerHost(t *testing.T, opts ...nodeOpt) *dockerHost {
	t.Helper()
	for _, bin := range []string{"dockerd", "containerd", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install Debian's docker.io (scripts/deps.sh does)", bin)
		}
	}
	dir, err := os.MkdirTemp("", "xle-dk-")
	if err != nil {
		t.Fatal(err)
	}
	sfx := suffix()
	h := &dockerHost{
		t: t, dir: dir, driver: "xle" + sfx, plugin: filepath.Join(dir, "xlane-docker.sock"),
		sock: filepath.Join(dir, "docker.sock"), cgroup: "xle-dk-" + sfx, cli: "docker",
		log: &bytes.Buffer{}, image: "xlane-e2e/busybox:" + sfx, nsLinks: map[string]string{},
	}
	h.spec = filepath.Join("/etc/docker/plugins", h.driver+".spec")
	if _, err := os.Stat("/usr/bin/docker"); err == nil {
		h.cli = "/usr/bin/docker" // docker.io's CLI, of the daemon's version
	}
	opts = append(opts, func(n *node) { n.flags = append(n.flags, "--docker-plugin-socket", h.plugin) })
	h.n = newNode(t, opts...)
	t.Cleanup(h.cleanup)
	if err := os.MkdirAll(filepath.Dir(h.spec), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.spec, []byte("unix://"+h.plugin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.startDockerd()
	h.importBusybox()
	return h
}

func (h *dockerHost) startDockerd() {
	h.t.Helper()
	h.cmd = inNS(h.n.netns, "dockerd",
		"--data-root", filepath.Join(h.dir, "data"), "--exec-root", filepath.Join(h.dir, "exec"),
		"-H", "unix://"+h.sock, "--pidfile", filepath.Join(h.dir, "docker.pid"),
		"--cgroup-parent", h.cgroup, "--live-restore")
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := h.cmd.Start(); err != nil {
		h.t.Fatalf("start dockerd: %v", err)
	}
	h.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(h.cmd, h.exited)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := h.docker("version"); err == nil {
			return
		}
		select {
		case <-h.exited:
			h.t.Fatalf("dockerd exited:\n%s", h.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.t.Fatalf("dockerd did not come up:\n%s", h.log)
}

// stopDockerd stops the dockerd this test started, by pid. With
// --live-restore the containers keep running.
func (h *dockerHost) stopDockerd() {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(40 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
	h.cmd = nil
}

func (h *dockerHost) cleanup() {
	if h.cmd != nil {
		if out, err := h.docker("ps", "-aq"); err == nil && strings.TrimSpace(out) != "" {
			h.docker(append([]string{"rm", "-f"}, strings.Fields(out)...)...)
		}
		h.stopDockerd()
	}
	// Whatever is left of ours: processes in our cgroup parent (containers
	// dockerd could not remove) and processes naming our directory
	// (containerd, shims), each by pid.
	for _, pid := range h.leftoverPids() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	h.unmountAll()
	// The cgroups runc made under our parent.
	removeCgroups(h.cgroup)
	os.Remove(h.spec)
	for _, link := range h.nsLinks {
		os.Remove(nsPath(link))
	}
	if err := os.RemoveAll(h.dir); err != nil {
		h.t.Errorf("remove %s: %v", h.dir, err)
	}
	if h.t.Failed() {
		h.t.Logf("dockerd log (last 8 KiB):\n%s", tail(h.log.String(), 8<<10))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (h *dockerHost) leftoverPids() []int { return leftoverPids(h.dir, h.cgroup) }

// leftoverPids lists the processes a test's runtime left: in its cgroup
// parent (every hierarchy), or naming its directory on their command line
// (containerd, shims).
func leftoverPids(dir, cgroup string) []int {
	var pids []int
	seen := map[int]bool{}
	procs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", cgroup, "*", "cgroup.procs"))
	for _, f := range procs {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || seen[pid] {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmdline, []byte(dir)) {
			seen[pid] = true
			pids = append(pids, pid)
		}
	}
	return pids
}

func (h *dockerHost) unmountAll() { unmountUnder(h.dir) }

// unmountUnder lazily unmounts what a runtime left mounted under dir
// (overlays, netns bind mounts), deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mnts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mnts = append(mnts, fields[4])
		}
	}
	for i := len(mnts) - 1; i >= 0; i-- {
		syscall.Unmount(mnts[i], syscall.MNT_DETACH)
	}
}

// removeCgroups removes a runtime's cgroup parent and the cgroups under it
// in every hierarchy (empty once their processes are gone: rmdir removes
// nothing else).
func removeCgroups(cgroup string) {
	bases, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", cgroup))
	for _, base := range bases {
		subs, _ := filepath.Glob(filepath.Join(base, "*"))
		for _, s := range subs {
			if fi, err := os.Stat(s); err == nil && fi.IsDir() {
				os.Remove(s)
			}
		}
		os.Remove(base)
	}
}

// docker runs the Docker CLI against this test's dockerd.
func (h *dockerHost) docker(args ...string) (string, error) {
	return h.dockerIn(nil, args...)
}

func (h *dockerHost) dockerIn(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(h.cli, append([]string{"-H", "unix://" + h.sock}, args...)...)
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(h.dir, "cli"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if d := time.Since(start); d > 2*time.Second {
		h.t.Logf("docker %s took %v", strings.Join(args, " "), d.Round(time.Millisecond))
	}
	return strings.TrimSpace(string(out)), err
}

func (h *dockerHost) mustDocker(args ...string) string {
	h.t.Helper()
	out, err := h.docker(args...)
	if err != nil {
		h.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// importBusybox builds the test image from Debian's busybox-static: no
// registry is reachable.
func (h *dockerHost) importBusybox() {
	h.t.Helper()
	const bb = "/bin/busybox"
	f, err := elf.Open(bb)
	if err != nil {
		h.t.Fatalf("%s: %v (install busybox-static)", bb, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			h.t.Fatalf("%s is dynamically linked: install busybox-static", bb)
		}
	}
	f.Close()
	bin, err := os.ReadFile(bb)
	if err != nil {
		h.t.Fatal(err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		h.t.Fatalf("busybox --list: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "etc/", "tmp/", "proc/", "sys/", "dev/", "root/"} {
		tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, a := range strings.Fields(string(list)) {
		if a != "busybox" {
			tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
		}
	}
	tw.Close()
	if out, err := h.dockerIn(buf.Bytes(), "import", "-", h.image); err != nil {
		h.t.Fatalf("docker import: %v\n%s", err, out)
	}
}

// run starts a container (sleeping) and returns its name.
func (h *dockerHost) run(name string, args ...string) string {
	h.t.Helper()
	h.mustDocker(append(append([]string{"run", "-d", "--name", name}, args...), h.image, "sleep", "100000")...)
	h.ctrNames = append(h.ctrNames, name)
	return name
}

// ns returns a /var/run/netns name for the container's network namespace
// (a link to /proc/PID/ns/net), for the harness's ping and transfer.
func (h *dockerHost) ns(ctr string) string {
	h.t.Helper()
	pid := h.mustDocker("inspect", "-f", "{{.State.Pid}}", ctr)
	link, ok := h.nsLinks[ctr]
	if !ok {
		link = "xle-ctr-" + suffix()
		h.nsLinks[ctr] = link
	}
	os.Remove(nsPath(link))
	os.MkdirAll(filepath.Dir(nsPath(link)), 0o755)
	if err := os.Symlink("/proc/"+pid+"/ns/net", nsPath(link)); err != nil {
		h.t.Fatal(err)
	}
	return link
}

// attachment is what docker inspect says about a container on a network.
type attachment struct {
	EndpointID        string
	IPAddress         string
	GlobalIPv6Address string
	Gateway           string
	IPv6Gateway       string
	MacAddress        string
}

func (h *dockerHost) attachment(ctr, network string) attachment {
	h.t.Helper()
	var nets map[string]attachment
	out := h.mustDocker("inspect", "-f", "{{json .NetworkSettings.Networks}}", ctr)
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		h.t.Fatalf("inspect %s: %v\n%s", ctr, err, out)
	}
	a, ok := nets[network]
	if !ok {
		h.t.Fatalf("%s is not on network %s: %s", ctr, network, out)
	}
	return a
}

func (a attachment) v4() netip.Addr { return netip.MustParseAddr(a.IPAddress) }
func (a attachment) v6() netip.Addr { return netip.MustParseAddr(a.GlobalIPv6Address) }

// noPing checks that dst is not reachable from netns.
func noPing(t *testing.T, netns string, dst netip.Addr) {
	t.Helper()
	if out, err := inNS(netns, "ping", "-c", "1", "-W", "1", dst.String()).CombinedOutput(); err == nil {
		t.Fatalf("ping %s from %s went through, want it refused:\n%s", dst, netns, out)
	}
}

// withDockerOutside connects the node to an "outside" namespace through
// its uplink dkup0 (xlaned --uplink: masquerade and published ports live
// there). The outside routes back only the subnets that are not
// masqueraded (kern) or must stay unreachable (intern).
func withDockerOutside(out *string) nodeOpt {
	return func(n *node) {
		t := n.t
		*out = newNetns(t, "out")
		runIn(t, n.netns, "ip", "link", "add", "dkup0", "type", "veth", "peer", "name", "out0", "netns", nsPath(*out))
		for _, c := range [][]string{
			{"ip", "addr", "add", "10.97.0.1/24", "dev", "dkup0"},
			{"ip", "addr", "add", "fd00:97::1/64", "dev", "dkup0", "nodad"},
			{"ip", "link", "set", "dkup0", "up"},
			{"ip", "route", "add", "default", "via", "10.97.0.2"},
			{"ip", "-6", "route", "add", "default", "via", "fd00:97::2"},
			{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"},
		} {
			runIn(t, n.netns, c...)
		}
		for _, c := range [][]string{
			{"ip", "addr", "add", "10.97.0.2/24", "dev", "out0"},
			{"ip", "addr", "add", "fd00:97::2/64", "dev", "out0", "nodad"},
			{"ip", "link", "set", "out0", "up"},
			{"ip", "link", "set", "lo", "up"},
			{"ip", "route", "add", "10.98.1.0/24", "via", "10.97.0.1"},
			{"ip", "route", "add", "10.98.2.0/24", "via", "10.97.0.1"},
		} {
			runIn(t, *out, c...)
		}
		n.flags = append(n.flags, "--uplink", "dkup0")
	}
}

// peerSeen connects from netns from to dst (a listener in netns to) and
// returns the source address the listener saw.
func peerSeen(t *testing.T, from, to string, dst netip.AddrPort) netip.Addr {
	t.Helper()
	ln := listenIn(t, to, dst)
	defer ln.Close()
	seen := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			seen <- netip.Addr{}
			return
		}
		seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		c.Close()
	}()
	// A connection that must work: a lost first SYN (a loaded machine)
	// gets its retransmission's time before it counts as a failure.
	c, err := dialIn(from, dst, 5*time.Second)
	if err != nil {
		t.Fatalf("connect %s from %s: %v", dst, from, err)
	}
	c.Close()
	return <-seen
}

//	network  subnets                      docker options
//	dual     10.98.0.0/24, fd00:98::/64    --ipv6, -o xlane.mode=tc
//	kern     10.98.1.0/24                  -o xlane.mode=kernel, mtu 1400
//	intern   10.98.2.0/24                  --internal (xlane's default mode)
//
// Containers c1, c2 on dual; c3 on kern, later c1 too (docker network
// connect); i1, i2 on intern; web on dual with -p 8080:80. Checked:
// addresses and gateways as Docker's IPAM chose them, ping and
// SHA-256-checked TCP between containers (both families), to the node and
// to the outside (masqueraded on dual, routed on kern); the fast path used;
// published ports from the outside, from a container and from the node;
// connect/disconnect; --internal (a gateway reaching only the node); the refusals as sentences in the CLI;
// kill -9 and restart of xlaned and restart of dockerd (--live-restore), in
// either order, with traffic checked while each is down and after; docker
// network rm leaving nothing behind.
func TestDockerDriver(t *testing.T) {
	var out string
	h := newDockerHost(t, withDockerOutside(&out))
	n := h.n
	o4, o6 := netip.MustParseAddr("10.97.0.2"), netip.MustParseAddr("fd00:97::2")
	node4, node6 := netip.MustParseAddr("10.97.0.1"), netip.MustParseAddr("fd00:97::1")
	const size = 32 << 20

	nets := map[string]string{} // docker network name -> ID
	t.Run("create networks", func(t *testing.T) {
		nets["dual"] = h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.98.0.0/24", "--ipv6", "--subnet", "fd00:98::/64",
			"-o", "xlane.mode=tc", "dual")
		nets["kern"] = h.mustDocker("network", "create", "-d", h.driver, "--subnet", "10.98.1.0/24",
			"-o", "xlane.mode=kernel", "-o", "com.docker.network.driver.mtu=1400",
			"-o", "com.docker.network.bridge.enable_ip_masquerade=false", "kern")
		nets["intern"] = h.mustDocker("network", "create", "-d", h.driver, "--internal", "--subnet", "10.98.2.0/24", "intern")
		var xnets []api.NetworkInfo
		n.mustXlane(&xnets, "network", "ls")
		want := map[string]string{
			"docker-" + nets["dual"][:12]:   "tc [10.98.0.0/24 fd00:98::/64] 1500 false",
			"docker-" + nets["kern"][:12]:   "kernel [10.98.1.0/24] 1400 false",
			"docker-" + nets["intern"][:12]: "default [10.98.2.0/24] 1500 true", // xlane's default mode
		}
		for _, x := range xnets {
			mode := string(x.Mode)
			if x.Name == "docker-"+nets["intern"][:12] {
				mode = "default"
			}
			got := fmt.Sprintf("%s %v %d %v", mode, x.Subnets, x.MTU, x.Internal)
			if want[x.Name] != got {
				t.Errorf("xlane network %s: %s, want %q", x.Name, got, want[x.Name])
			}
			delete(want, x.Name)
		}
		if len(want) > 0 {
			t.Fatalf("xlane networks missing: %v (have %+v)", want, xnets)
		}
	})

	c1, c2 := h.run("c1", "--network", "dual"), h.run("c2", "--network", "dual")
	a1, a2 := h.attachment(c1, "dual"), h.attachment(c2, "dual")
	t.Run("containers on one network", func(t *testing.T) {
		if a1.Gateway != "10.98.0.1" || a1.IPv6Gateway != "fd00:98::1" {
			t.Errorf("c1 gateways %q %q, want Docker's 10.98.0.1 and fd00:98::1", a1.Gateway, a1.IPv6Gateway)
		}
		var ep api.EndpointInfo
		n.mustXlane(&ep, "endpoint", "inspect", a1.EndpointID)
		if len(ep.IPs) != 2 || ep.IPs[0] != a1.v4() || ep.IPs[1] != a1.v6() {
			t.Errorf("xlane endpoint addresses %v, Docker's %s %s", ep.IPs, a1.IPAddress, a1.GlobalIPv6Address)
		}
		ns1, ns2 := h.ns(c1), h.ns(c2)
		ping(t, ns1, a2.v4())
		ping(t, ns1, a2.v6())
		ping(t, ns2, a1.v4())
		ping(t, ns2, a1.v6())
		ping(t, ns1, netip.MustParseAddr("10.98.0.1"))
		ping(t, ns1, netip.MustParseAddr("fd00:98::1"))
		h.mustDocker("exec", c1, "ping", "-c", "1", "-W", "2", a2.IPAddress)
		transfer(t, ns1, ns2, a2.v4(), size)
		transfer(t, ns2, ns1, a1.v6(), size)
		n.mustXlane(&ep, "endpoint", "inspect", a1.EndpointID)
		if c := reason(ep, "fwd_peer", "from_endpoint"); c.Bytes < size {
			t.Errorf("c1 fwd_peer = %d bytes, want the transfer on the fast path; %+v", c.Bytes, ep.Reasons)
		}
		// Join gave Docker a gateway: no docker_gwbridge for outbound.
		if links := runIn(t, n.netns, "ip", "-o", "link"); strings.Contains(links, "docker_gwbridge") {
			t.Errorf("Docker attached a gateway bridge:\n%s", links)
		}
		// --mac-address: the veth carries it, so the node's neighbour entry
		// and the datapath agree with the container.
		const mac = "02:42:0a:62:00:63"
		cm := h.run("cm", "--network", "dual", "--mac-address", mac)
		am := h.attachment(cm, "dual")
		n.mustXlane(&ep, "endpoint", "inspect", am.EndpointID)
		if link := runIn(t, h.ns(cm), "ip", "-o", "link", "show", "eth0"); ep.MAC != mac || !strings.Contains(link, mac) {
			t.Errorf("--mac-address %s: xlane has %s, the container:\n%s", mac, ep.MAC, link)
		}
		ping(t, h.ns(cm), a1.v4())
		ping(t, n.netns, am.v4())
		h.mustDocker("rm", "-f", cm)
	})

	t.Run("node and outside", func(t *testing.T) {
		ns1 := h.ns(c1)
		ping(t, n.netns, a1.v4())
		ping(t, n.netns, a1.v6())
		ping(t, ns1, o4)
		ping(t, ns1, o6)
		transfer(t, ns1, out, o4, size)
		transfer(t, ns1, out, o6, size/2)
		// Masqueraded, as on a bridge: the outside sees the node.
		if src := peerSeen(t, ns1, out, netip.AddrPortFrom(o4, 9000)); src != node4 {
			t.Errorf("the outside saw %v, want the node's %v", src, node4)
		}
		if src := peerSeen(t, ns1, out, netip.AddrPortFrom(o6, 9000)); src != node6 {
			t.Errorf("the outside saw %v, want the node's %v", src, node6)
		}
	})

	web := h.run("web", "--network", "dual", "-p", "8080:80")
	aw := h.attachment(web, "dual")
	t.Run("published ports", func(t *testing.T) {
		nsw := h.ns(web)
		transferVia(t, out, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8080), size)
		transferVia(t, out, nsw, netip.AddrPortFrom(aw.v6(), 80), netip.AddrPortFrom(node6, 8080), size/2)
		transferVia(t, h.ns(c2), nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8080), size/2)
		transferVia(t, n.netns, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8080), size/2)
		transferVia(t, n.netns, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.MustParseAddrPort("127.0.0.1:8080"), size/2)
		transferVia(t, n.netns, nsw, netip.AddrPortFrom(aw.v4(), 80), netip.MustParseAddrPort("[::1]:8080"), size/4)
		if msg, err := h.docker("run", "-d", "--name", "web2", "--network", "dual", "-p", "8080:81", h.image, "sleep", "1"); err == nil || !strings.Contains(msg, "8080/tcp is published by endpoint") {
			t.Errorf("second -p 8080: %v\n%s\nwant Docker to show xlane's conflict", err, msg)
		}
		h.docker("rm", "-f", "web2")
	})

	t.Run("refusals are sentences", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"run", "-d", "--name", "pub", "-p", "5300:53/sctp", "--network", "dual", h.image, "sleep", "1"},
				"xlane publishes tcp and udp ports only (protocol 132)"},
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.98.7.0/24", "-o", "xlane.mode=kernel", "kmasq"},
				"off with -o com.docker.network.bridge.enable_ip_masquerade=false"},
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.98.3.0/24", "-o", "xlane.mode=kernel",
				"-o", "com.docker.network.bridge.enable_ip_masquerade=false", "-o", "com.docker.network.bridge.enable_icc=false", "noicc"},
				"com.docker.network.bridge.enable_icc=false: mode kernel has no datapath to keep the network's endpoints apart (ICC off)"},
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.98.4.0/24", "--subnet", "10.98.5.0/24", "two"},
				"an xlane network takes one IPv4 subnet; Docker sent 2"},
			{[]string{"network", "create", "-d", h.driver, "--subnet", "10.98.6.0/24", "-o", "xlane.mode=warp", "warp"},
				`option xlane.mode="warp": unknown mode`},
		} {
			out, err := h.docker(c.args...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("docker %s: %v\n%s\nwant an error saying %q", strings.Join(c.args, " "), err, out, c.want)
			}
		}
		h.docker("rm", "-f", "pub")
		var eps []api.EndpointInfo
		n.mustXlane(&eps, "endpoint", "ls")
		if len(eps) != 3 {
			t.Errorf("%d xlane endpoints after the refused run, want c1's, c2's and web's", len(eps))
		}
	})

	c3 := h.run("c3", "--network", "kern")
	t.Run("connect and disconnect", func(t *testing.T) {
		a3 := h.attachment(c3, "kern")
		h.mustDocker("network", "connect", "kern", c1)
		a1k := h.attachment(c1, "kern")
		ns1, ns3 := h.ns(c1), h.ns(c3)
		if link := runIn(t, ns1, "ip", "-o", "link", "show", "eth1"); !strings.Contains(link, " mtu 1400 ") {
			t.Errorf("c1 eth1 is not at mtu 1400 (com.docker.network.driver.mtu):\n%s", link)
		}
		ping(t, ns1, a3.v4())
		ping(t, ns3, a1k.v4())
		transfer(t, ns3, ns1, a1k.v4(), size)
		// kern is routed, not masqueraded: c3 reaches the outside from
		// its own address, and gets the answers; the outside, which has
		// a route to it, cannot open flows to it (as Docker 28's bridge
		// blocks direct routing; nftables guard in kernel mode).
		ping(t, ns3, o4)
		transfer(t, ns3, out, o4, size/4)
		acceptAndClose(listenIn(t, ns3, netip.AddrPortFrom(a3.v4(), 8080)))
		if err := dialOnce(out, netip.AddrPortFrom(a3.v4(), 8080)); err == nil {
			t.Errorf("the outside connected to c3's unpublished port 8080")
		}
		noPing(t, out, a3.v4())
		ping(t, ns1, a2.v4()) // the first network still works
		h.mustDocker("network", "disconnect", "kern", c1)
		if links := runIn(t, ns1, "ip", "-o", "link"); strings.Contains(links, "eth1") {
			t.Errorf("eth1 still in c1 after disconnect:\n%s", links)
		}
		if _, _, err := n.xlane("endpoint", "inspect", a1k.EndpointID); err == nil {
			t.Errorf("xlane endpoint %s still there after disconnect", a1k.EndpointID[:12])
		}
		ping(t, ns1, a2.v4())
		transfer(t, ns1, h.ns(c2), a2.v4(), size/4)
	})

	t.Run("internal", func(t *testing.T) {
		i1, i2 := h.run("i1", "--network", "intern"), h.run("i2", "--network", "intern")
		ai1, ai2 := h.attachment(i1, "intern"), h.attachment(i2, "intern")
		// A gateway, as on Docker 20.10's bridge, that reaches only the
		// node (every address of it): the node routes nothing off the
		// node for the network, and the datapath keeps it apart from the
		// others.
		if ai1.Gateway != "10.98.2.1" {
			t.Errorf("i1 has gateway %q on an internal network, want 10.98.2.1", ai1.Gateway)
		}
		nsi1 := h.ns(i1)
		ping(t, nsi1, ai2.v4())
		transfer(t, nsi1, h.ns(i2), ai2.v4(), size/4)
		ping(t, n.netns, ai1.v4())
		ping(t, nsi1, node4)
		noPing(t, nsi1, o4)
		noPing(t, out, ai1.v4()) // the outside has a route: the node refuses
		noPing(t, nsi1, a1.v4())
	})

	t.Run("xlaned kill -9 and restart", func(t *testing.T) {
		n.stop(syscall.SIGKILL)
		ns1, ns2 := h.ns(c1), h.ns(c2)
		ping(t, ns1, a2.v6())
		transfer(t, ns2, ns1, a1.v4(), size)
		transferVia(t, out, h.ns(web), netip.AddrPortFrom(aw.v4(), 80), netip.AddrPortFrom(node4, 8080), size/4)
		n.start()
		transferVia(t, n.netns, h.ns(web), netip.AddrPortFrom(aw.v4(), 80), netip.MustParseAddrPort("127.0.0.1:8080"), size/4)
		c4 := h.run("c4", "--network", "dual")
		a4 := h.attachment(c4, "dual")
		ping(t, h.ns(c4), a1.v4())
		ping(t, h.ns(c4), a2.v6())
		ping(t, ns1, a4.v4())
		h.mustDocker("rm", "-f", c4)
	})

	t.Run("dockerd restart", func(t *testing.T) {
		h.stopDockerd()
		ns1, ns2 := h.ns2(c1), h.ns2(c2)
		ping(t, ns1, a2.v4())
		transfer(t, ns1, ns2, a2.v6(), size)
		h.startDockerd()
		if st := h.mustDocker("inspect", "-f", "{{.State.Running}}", c1); st != "true" {
			t.Fatalf("c1 running = %s after dockerd restart (live-restore)", st)
		}
		h.mustDocker("exec", c1, "ping", "-c", "1", "-W", "2", a2.IPAddress)
		c5 := h.run("c5", "--network", "dual")
		ping(t, h.ns(c5), a1.v4())
		h.mustDocker("rm", "-f", c5)
	})

	t.Run("both down, dockerd back first", func(t *testing.T) {
		n.stop(syscall.SIGTERM)
		h.stopDockerd()
		ns1, ns2 := h.ns2(c1), h.ns2(c2)
		ping(t, ns1, a2.v4())
		h.startDockerd()
		ping(t, ns2, a1.v6())
		n.start()
		c6 := h.run("c6", "--network", "dual")
		ping(t, h.ns(c6), a1.v4())
		transfer(t, h.ns(c6), ns2, a2.v4(), size/4)
		if got := h.mustDocker("network", "inspect", "-f", "{{.Driver}} {{(index .IPAM.Config 0).Subnet}}", "dual"); got != h.driver+" 10.98.0.0/24" {
			t.Errorf("docker network inspect dual: %q", got)
		}
	})

	t.Run("network rm leaves nothing", func(t *testing.T) {
		ctrs := strings.Fields(h.mustDocker("ps", "-aq"))
		h.mustDocker(append([]string{"rm", "-f"}, ctrs...)...)
		for _, name := range []string{"dual", "kern", "intern"} {
			h.mustDocker("network", "rm", name)
		}
		if err := dialOnce(out, netip.AddrPortFrom(node4, 8080)); err == nil {
			t.Errorf("port 8080 still answers after docker rm")
		}
		if err := dialOnce(n.netns, netip.MustParseAddrPort("127.0.0.1:8080")); err == nil {
			t.Errorf("localhost:8080 still answers on the node after docker rm")
		}
		var xnets []api.NetworkInfo
		n.mustXlane(&xnets, "network", "ls")
		var eps []api.EndpointInfo
		n.mustXlane(&eps, "endpoint", "ls")
		if len(xnets) != 0 || len(eps) != 0 {
			t.Errorf("after docker network rm: xlane networks %v, endpoints %d", xnets, len(eps))
		}
		assertCleanNamed(t, n, "10.98.", "fd00:98")
		for _, fam := range []string{"-4", "-6"} {
			if rules := runIn(t, n.netns, "ip", fam, "rule"); strings.Contains(rules, "9000") || strings.Contains(rules, "9001") {
				t.Errorf("policy rules left (%s):\n%s", fam, rules)
			}
		}
		for _, bin := range []string{"iptables", "ip6tables"} {
			if rules := runIn(t, n.netns, bin, "-S", "FORWARD"); strings.Contains(rules, "xlane") {
				t.Errorf("%s rules left:\n%s", bin, rules)
			}
		}
	})
}

// ns2 is ns for a container while dockerd is down: the pid comes from the
// link made while it was up (live-restore keeps the container's process).
func (h *dockerHost) ns2(ctr string) string {
	h.t.Helper()
	link, ok := h.nsLinks[ctr]
	if !ok {
		h.t.Fatalf("no namespace link for %s yet", ctr)
	}
	return link
}
