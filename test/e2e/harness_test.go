// Package e2e runs xlane for real: daemons in their own "node" network
// namespaces, containers as network namespaces, real traffic checked by the
// receiving kernel and by SHA-256 at the receiver. Root only; CI is root.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
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

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/internal/api"
)

var binDir string

func TestMain(m *testing.M) {
	maybeHelper() // accel_helper_test.go: helper processes run and exit here
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: these tests create namespaces and load BPF: run them as root (make test does)")
		os.Exit(1)
	}
	// Prebuilt binaries (the kernel matrix builds them on the host, static,
	// before booting a guest that has no Go toolchain to use).
	if dir := os.Getenv("XLANE_E2E_BIN"); dir != "" {
		binDir = dir
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "xlane-e2e-bin-")
	if err != nil {
		panic(err)
	}
	// cnitool (cni_test.go) at the version of this module's go.mod.
	for b, pkg := range map[string]string{
		"xlaned": "github.com/xlane-dev/xlane/cmd/xlaned", "xlane": "github.com/xlane-dev/xlane/cmd/xlane",
		"xlane-cni": "github.com/xlane-dev/xlane/cmd/xlane-cni", "cnitool": "github.com/containernetworking/cni/cnitool",
	} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b), pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b, err, out)
			os.Exit(1)
		}
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func suffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newNetns creates a uniquely named namespace, removed when the test ends.
func newNetns(t *testing.T, prefix string) string {
	t.Helper()
	name := "xle-" + prefix + "-" + suffix()
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func nsPath(name string) string { return "/var/run/netns/" + name }

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// inNS runs a command inside a namespace. nsenter, not `ip netns exec`,
// which remounts /sys and hides bpffs.
func inNS(netns string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + nsPath(netns), "--"}, args...)...)
}

func runIn(t *testing.T, netns string, args ...string) string {
	t.Helper()
	out, err := inNS(netns, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", netns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// node is one xlaned instance in its own network namespace.
type node struct {
	t      *testing.T
	netns  string
	dir    string
	socket string
	pinDir string
	cmd    *exec.Cmd
	log    *bytes.Buffer
	flags  []string
	// env: extra environment of xlaned (KEY=VALUE).
	env []string
	// readyIn: from the last start to the API's first answer.
	readyIn time.Duration
	// external: xlaned is not this test's process (a DaemonSet's pod
	// runs it): newNode does not start one, nor set socket and pinDir
	// (the caller does, where that xlaned has them).
	external bool
}

// nodeOpt prepares a node's namespace before its daemon starts, and may
// add daemon flags.
type nodeOpt func(n *node)

func newNode(t *testing.T, opts ...nodeOpt) *node {
	t.Helper()
	n := &node{t: t, netns: newNetns(t, "node"), dir: t.TempDir()}
	for _, o := range opts {
		o(n)
	}
	if n.external {
		return n
	}
	n.socket = filepath.Join(n.dir, "xlane.sock")
	n.pinDir = "/sys/fs/bpf/xle-" + suffix()
	t.Cleanup(func() {
		defer os.RemoveAll(n.pinDir)
		defer n.stop(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("xlaned log:\n%s", n.log)
			if n.cmd != nil {
				st, _, _ := n.xlane("status")
				eps, _, _ := n.xlane("endpoint", "ls", "-o", "json")
				t.Logf("xlane status:\n%s\nendpoints:\n%s", st, eps)
			}
		}
	})
	n.start()
	return n
}

func (n *node) start() {
	n.t.Helper()
	if n.log == nil {
		n.log = &bytes.Buffer{}
	}
	// No Docker driver unless a test asks for one (a later flag wins): the
	// default socket is the machine's /run/docker/plugins. No calibration
	// traffic in the background of a test unless it asks (calibrate_test.go).
	args := append([]string{filepath.Join(binDir, "xlaned"),
		"--state", filepath.Join(n.dir, "state.db"), "--socket", n.socket, "--pin-dir", n.pinDir,
		"--docker-plugin-socket=", "--calibrate-at-start=false"}, n.flags...)
	n.cmd = inNS(n.netns, args...)
	if len(n.env) > 0 {
		n.cmd.Env = append(os.Environ(), n.env...)
	}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		n.t.Fatalf("start xlaned: %v", err)
	}
	start := time.Now()
	for {
		if _, err := n.client().Status(context.Background()); err == nil {
			n.readyIn = time.Since(start)
			return
		}
		time.Sleep(50 * time.Millisecond)
		cpu, alive := processCPU(n.cmd.Process.Pid)
		if !alive {
			n.t.Fatalf("xlaned exited before it served:\n%s", n.log)
		}
		if why := startOverdue(time.Since(start), cpu); why != "" {
			n.t.Fatalf("xlaned did not come up: %s:\n%s", why, n.log)
		}
	}
}

// startTimeout is how long xlaned may take to serve where the machine is
// its own: loading verifies every program, well under a second here but
// about a minute of a core in the kernel matrix's emulated 6.1 guest
// (xlane_from_endpoint: ~750k instructions to verify).
func startTimeout() time.Duration {
	if os.Getenv("XLANE_VM_KERNEL") != "" {
		return 5 * time.Minute
	}
	return 30 * time.Second
}

// startOverdue says why a daemon that has run for wall, with cpu of CPU
// time, is late to serve, or "". In the kernel matrix's guests the clock
// that counts is the daemon's CPU time: CI runs the guests at nice 10
// beside make test and builds, where a guest may get a tenth of a core for
// minutes, and a wall-clock deadline failed daemons that were verifying
// at that pace (CI run 38). The wall bound there only stops a hang.
func startOverdue(wall, cpu time.Duration) string {
	if os.Getenv("XLANE_VM_KERNEL") == "" {
		if wall > startTimeout() {
			return fmt.Sprintf("not in %s", startTimeout())
		}
		return ""
	}
	switch {
	case cpu > startTimeout():
		return fmt.Sprintf("not after %s of CPU (%s of wall time)", cpu.Round(time.Second), wall.Round(time.Second))
	case wall > 6*startTimeout():
		return fmt.Sprintf("not in %s of wall time (%s of CPU)", wall.Round(time.Second), cpu.Round(time.Second))
	}
	return ""
}

// processCPU is the user and system time pid has used, and whether it
// still runs (not gone, not a zombie).
func processCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// After the command (which may hold spaces) in parentheses: the state
	// (3rd field of the line), utime and stime (14th and 15th) in clock
	// ticks (USER_HZ: 100 on Linux).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, true
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond, f[0] != "Z" && f[0] != "X"
}

// skipInMatrixGuest skips a test that cannot run inside the kernel
// matrix's QEMU guests (vmexec sets XLANE_VM_KERNEL there), saying why;
// everywhere else, prebuilt binaries (XLANE_E2E_BIN) included, it runs.
func skipInMatrixGuest(t *testing.T, why string) {
	t.Helper()
	if k := os.Getenv("XLANE_VM_KERNEL"); k != "" {
		t.Skipf("in the kernel matrix's %s guest: %s", k, why)
	}
}

// stop ends the daemon this test started, by pid.
func (n *node) stop(sig syscall.Signal) {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	n.cmd.Process.Signal(sig)
	n.cmd.Wait()
	n.cmd = nil
}

func (n *node) client() *api.Client { return api.NewClient(n.socket) }

// xlane runs the CLI against this node's daemon.
func (n *node) xlane(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(filepath.Join(binDir, "xlane"), append([]string{"--socket", n.socket}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// mustXlane runs the CLI with -o json and decodes the output into out.
func (n *node) mustXlane(out any, args ...string) {
	n.t.Helper()
	o, e, err := n.xlane(append(args, "-o", "json")...)
	if err != nil {
		n.t.Fatalf("xlane %s: %v\n%s", strings.Join(args, " "), err, e)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(o), out); err != nil {
			n.t.Fatalf("xlane %s: decode %q: %v", strings.Join(args, " "), o, err)
		}
	}
}

func ping(t *testing.T, netns string, dst netip.Addr) {
	t.Helper()
	out, err := inNS(netns, "ping", "-c", "2", "-i", "0.2", "-W", "2", dst.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from %s: %v\n%s", dst, netns, err, out)
	}
}

// transfer moves size bytes of pseudo-random data over TCP from a socket in
// netns from to a listener on dst in netns to, and checks the SHA-256 of
// what arrived against what was sent.
func transfer(t *testing.T, from, to string, dst netip.Addr, size int64) {
	t.Helper()
	startTransfer(t, from, to, dst, size, 0)()
}

// startTransfer begins a checked transfer (see transfer) paced at rate
// bytes per second (0: as fast as it goes) and returns a function that
// waits for it and fails the test on any error or mismatch.
func startTransfer(t *testing.T, from, to string, dst netip.Addr, size, rate int64) (wait func()) {
	t.Helper()
	return startTransferVia(t, from, to, netip.AddrPortFrom(dst, 0), netip.AddrPort{}, size, rate)
}

// transferVia is transfer with the listener on listen (in to) and the
// client dialing dial (in from), e.g. a published port that DNATs to it.
func transferVia(t *testing.T, from, to string, listen, dial netip.AddrPort, size int64) {
	t.Helper()
	startTransferVia(t, from, to, listen, dial, size, 0)()
}

// listenIn opens a TCP listener on addr in netns; it is closed when the
// test ends at the latest (closing it earlier is fine).
func listenIn(t *testing.T, netns string, addr netip.AddrPort) net.Listener {
	t.Helper()
	var ln net.Listener
	err := ns.WithNetNSPath(nsPath(netns), func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, netns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// udpPair listens for UDP on addr in netns to and dials it from netns
// from; the caller closes both.
func udpPair(t *testing.T, from, to string, addr netip.AddrPort) (srv, c *net.UDPConn) {
	t.Helper()
	err := ns.WithNetNSPath(nsPath(to), func(ns.NetNS) error {
		var err error
		srv, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("listen udp %s: %v", addr, err)
	}
	err = ns.WithNetNSPath(nsPath(from), func(ns.NetNS) error {
		var err error
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		srv.Close()
		t.Fatalf("dial udp %s: %v", addr, err)
	}
	return srv, c
}

// acceptAndClose accepts connections on ln and closes them, until ln is
// closed.
func acceptAndClose(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func startTransferVia(t *testing.T, from, to string, listen, dial netip.AddrPort, size, rate int64) (wait func()) {
	t.Helper()
	ln := listenIn(t, to, listen)
	type result struct {
		sum [32]byte
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(90 * time.Second))
		h := sha256.New()
		n, err := io.Copy(h, c)
		var r result
		copy(r.sum[:], h.Sum(nil))
		r.n, r.err = n, err
		got <- r
	}()
	var conn net.Conn
	err := ns.WithNetNSPath(nsPath(from), func(ns.NetNS) error {
		var err error
		target := ln.Addr().String()
		if dial.IsValid() {
			target = dial.String()
		}
		conn, err = net.DialTimeout("tcp", target, 5*time.Second)
		return err
	})
	if err != nil {
		ln.Close()
		t.Fatalf("connect %s from %s: %v", ln.Addr(), from, err)
	}
	sent := make(chan error, 1)
	h := sha256.New()
	go func() {
		conn.SetDeadline(time.Now().Add(90 * time.Second))
		src := io.Reader(mrand.NewChaCha8([32]byte{byte(size), 0x5a}))
		w := io.MultiWriter(conn, h)
		var err error
		if rate == 0 {
			_, err = io.CopyN(w, src, size)
		} else {
			const chunk = 64 << 10
			begin := time.Now()
			for done := int64(0); done < size && err == nil; done += chunk {
				if ahead := time.Duration(done*int64(time.Second)/rate) - time.Since(begin); ahead > 0 {
					time.Sleep(ahead)
				}
				_, err = io.CopyN(w, src, min(chunk, size-done))
			}
		}
		conn.(*net.TCPConn).CloseWrite()
		sent <- err
	}()
	return func() {
		t.Helper()
		defer ln.Close()
		defer conn.Close()
		if err := <-sent; err != nil {
			t.Fatalf("send to %s: %v", ln.Addr(), err)
		}
		r := <-got
		if r.err != nil {
			t.Fatalf("receive on %s: %v", ln.Addr(), r.err)
		}
		if r.n != size || !bytes.Equal(r.sum[:], h.Sum(nil)) {
			t.Fatalf("transfer %s -> %s: received %d bytes sha256 %x, sent %d bytes sha256 %x", from, ln.Addr(), r.n, r.sum, size, h.Sum(nil))
		}
	}
}
