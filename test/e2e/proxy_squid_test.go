package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/api"
)

// inCgroupNS is a command run in the cgroup at cg and the network
// namespace netns (killed with the test).
func inCgroupNS(t *testing.T, cg, netns string, args ...string) *exec.Cmd {
	t.Helper()
	fd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	c := inNS(netns, args...)
	c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
	return c
}

// waitListen waits until something listens on TCP port in netns.
func waitListen(t *testing.T, netns string, port int, what string, log func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := inNS(netns, "ss", "-Htln", "sport", "= :"+strconv.Itoa(port)).Output()
		if strings.TrimSpace(string(out)) != "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s does not listen on %d after 30 s\n%s", what, port, log())
}

// squid is Debian's squid in intercept mode on port (both families, every
// address) in netns and cgroup cg, with its files in a directory of its
// own; it runs as the proxy user (uid returned), as the packaged service
// does.
func squid(t *testing.T, cg, netns string, port int) (uid int, access func() string) {
	t.Helper()
	if _, err := exec.LookPath("squid"); err != nil {
		t.Fatalf("squid is not installed (scripts/deps.sh installs it): %v", err)
	}
	u, err := user.Lookup("proxy")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755)
	}
	conf := fmt.Sprintf(`http_port 127.0.0.1:%d
http_port %d intercept
http_access allow all
cache deny all
pid_filename %[3]s/squid.pid
cache_log %[3]s/cache.log
access_log stdio:%[3]s/access.log
netdb_filename none
coredump_dir %[3]s
cache_effective_user proxy
shutdown_lifetime 0 seconds
`, port+1, port, dir)
	if err := os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	read := func(name string) func() string {
		return func() string { b, _ := os.ReadFile(filepath.Join(dir, name)); return string(b) }
	}
	c := inCgroupNS(t, cg, netns, "squid", "-N", "-f", filepath.Join(dir, "squid.conf"))
	c.SysProcAttr.Setpgid = true // its pinger too, at the end
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		c.Wait()
		// squid's pinger leaves the process group (setsid): the cgroup
		// (the test's own) takes it.
		os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
		if t.Failed() {
			t.Logf("squid cache.log:\n%s\naccess.log:\n%s", read("cache.log")(), read("access.log")())
		}
	})
	waitListen(t, netns, port, "squid", read("cache.log"))
	return uid, read("access.log")
}

// TestProxySquid: Debian's squid in intercept mode behind `xlane proxy
// redirect` (outbound: its clients in the cgroup, the origin in another
// namespace), started before the redirect and after it, IPv4 and IPv6;
// every body SHA-256 checked both ways within the client's deadline (a
// connection squid holds fails it). Issue 36 §3: squid started first got
// ENOENT from SO_ORIGINAL_DST and held the client.
//
//	netns pa: client (cgroup cg) --connect 10.77.0.2:80--> [connect4:
//	          127.0.0.1:3129] squid (cg, uid proxy: exempt) ---> netns pc:
//	          origin 10.77.0.2:80, fd00:77::2
func TestProxySquid(t *testing.T) {
	n := newNode(t)
	cg, other := newCgroup(t, ""), newCgroup(t, "")
	pa, pc := n.netns, newNetns(t, "pc")
	vethBetween(t, pa, pc)
	startReady(t, helper(t, other, pc, "httpsrv", httpSrvArg{Port: 80}))
	// Neighbours resolved before squid's first upstream connect: a SYN
	// lost to the first IPv6 neighbour lookup on the fresh veth costs
	// squid's upstream 1 s, and squid 5.7 then aborts a 1 MiB request
	// whose body it was holding (TCP_MISS_ABORTED; not the redirect's).
	runIn(t, pa, "ping", "-c1", "-W5", "10.77.0.2")
	runIn(t, pa, "ping", "-6", "-c1", "-W5", "fd00:77::2")
	targets := []string{"10.77.0.2:80", "[fd00:77::2]:80"}
	const sq = 3129
	for i, order := range []string{"squid first", "redirect first"} {
		port := sq + 10*i
		var access func() string
		var uid int
		redirect := func() {
			n.mustXlane(nil, "proxy", "redirect", "--port", "80", "--to", strconv.Itoa(port), "--cgroup", cg,
				"--exempt", "uid", "--uid", "13")
		}
		if order == "squid first" {
			uid, access = squid(t, cg, pa, port)
			redirect()
		} else {
			redirect()
			uid, access = squid(t, cg, pa, port)
		}
		if uid != 13 {
			t.Fatalf("the proxy user is uid %d, the test exempts 13", uid)
		}
		before := proxyCounters(n)
		for _, target := range targets {
			c := helper(t, cg, pa, "httpget", httpGetArg{Targets: []string{target}, Up: 1 << 20, Down: 8 << 20, Direct: true})
			if o, err := c.CombinedOutput(); err != nil {
				t.Errorf("%s: %s through squid: %v\n%s", order, target, err, o)
			}
		}
		after := proxyCounters(n)
		if got := after["origdst_found"] - before["origdst_found"]; got < 2 {
			t.Errorf("%s: origdst_found went up by %d, want 2: %v", order, got, after)
		}
		if got := after["origdst_missed"] - before["origdst_missed"]; got != 0 {
			t.Errorf("%s: origdst_missed went up by %d: %v", order, got, after)
		}
		log := access()
		for _, target := range targets {
			if !strings.Contains(log, "http://"+strings.TrimSuffix(target, ":80")+"/") {
				t.Errorf("%s: squid's access.log has no request to %s:\n%s", order, target, log)
			}
		}
		n.mustXlane(nil, "proxy", "rm", "80")
	}
}

// TestProxyStartOrder: the Go proxy of the test suite listening before
// `proxy redirect` is added: adding it must not connect to the proxy (the
// daemon's "is anything listening" check did, and that connection, not
// redirected, had no original destination: origdst_missed +1, and squid
// stops accepting after it), and every request through it works, IPv4 and
// IPv6, bodies SHA-256 checked.
func TestProxyStartOrder(t *testing.T) {
	n := newNode(t)
	cg := newCgroup(t, "")
	const port, to = 8080, 15001
	runIn(t, n.netns, "ip", "link", "set", "lo", "up")
	proxy := helper(t, cg, n.netns, "proxy", proxyArg{Port: to, Mark: 0x539})
	perr := startReady(t, proxy)
	before := proxyCounters(n)
	var out api.ProxyRedirect
	n.mustXlane(&out, "proxy", "redirect", "--port", strconv.Itoa(port), "--to", strconv.Itoa(to), "--cgroup", cg,
		"--exempt", "mark", "--mark", "0x539")
	if out.Warning != "" {
		t.Errorf("a warning with the proxy listening: %q", out.Warning)
	}
	if got := proxyCounters(n)["origdst_missed"] - before["origdst_missed"]; got != 0 {
		t.Errorf("adding the redirect: origdst_missed went up by %d (something connected to the proxy)", got)
	}
	c := helper(t, cg, n.netns, "http", httpArg{Port: port, Paths: []string{"0", "3000000"}})
	if o, err := c.CombinedOutput(); err != nil {
		t.Errorf("requests through the proxy started first: %v\n%s\nproxy: %s", err, o, perr)
	}
	after := proxyCounters(n)
	if after["origdst_missed"] != before["origdst_missed"] || after["origdst_found"]-before["origdst_found"] < 4 {
		t.Errorf("counters: before %v, after %v", before, after)
	}
}
