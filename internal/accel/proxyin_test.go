package accel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// TestProxyInbound runs bpf/sock_proxy.c's inbound redirect on real
// sockets, on the running kernel, without the daemon:
//
//	netns A (fresh), the test process moved into a fresh cgroup
//	  client --SYN 127.0.0.1:P / [::1]:P--> sk_lookup --> proxy listener (:to)
//	  proxy: getsockopt(SO_ORIGINAL_DST) -> dial P with SO_MARK (exempt)
//	         --SYN--> sk_lookup: exempt tuple -> the app on P
//
// The v6 listener enters the socket map from user space (FindListeners,
// pidfd_getfd), the v4 one by sockops at listen(). Payload SHA-256 checked
// both ways; counters checked; the exempt tuples leave at close; with the
// proxy's listener gone, connections are refused, not handed to the app.
func TestProxyInbound(t *testing.T) {
	const port, to, mark = 18080, 15001, 0x539
	moveToCgroup(t)
	nsA := newNetns(t)
	inNS(t, nsA, func() error {
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		return err
	})
	var cookie uint64
	inNS(t, nsA, func() (err error) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		return err
	})

	objs, err := bpf.LoadProxy("")
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	cg := cgroupOf(t)
	for _, h := range []struct {
		at   ebpf.AttachType
		prog *ebpf.Program
	}{
		{ebpf.AttachCGroupSockOps, objs.Sockops()},
		{ebpf.AttachCGroupGetsockopt, objs.Getsockopt()},
		{ebpf.AttachCGroupInet4Connect, objs.Connect4()},
		{ebpf.AttachCGroupInet6Connect, objs.Connect6()},
	} {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: h.at, Program: h.prog})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}

	// The proxy's IPv6 listener exists before the rule: it enters the map
	// the daemon's way.
	var lsn6, lsn4 net.Listener
	inNS(t, nsA, func() (err error) {
		lsn6, err = tcpListen("tcp6", "[::1]:"+strconv.Itoa(to))
		return err
	})
	defer lsn6.Close()
	if err := objs.In().Put(bpf.ProxyInKey{Netns: cookie, Port: port},
		&bpf.ProxyVal{ToPort: to, Exempt: bpf.ProxyExemptMark, Mark: mark}); err != nil {
		t.Fatal(err)
	}
	if err := objs.InTo().Put(bpf.ProxyInKey{Netns: cookie, Port: to}, uint16(port)); err != nil {
		t.Fatal(err)
	}
	nsPath := fmt.Sprintf("/proc/self/fd/%d", int(nsA))
	ls, err := FindListeners(nsPath, to)
	if err != nil || len(ls) != 1 || ls[0].Family != 6 || ls[0].Pid != os.Getpid() || ls[0].MPTCP {
		t.Fatalf("FindListeners: %+v, %v", ls, err)
	}
	if err := objs.Listeners().Put(bpf.ProxyLsnKey{Netns: cookie, Port: to, Family: 6}, uint64(ls[0].File.Fd())); err != nil {
		t.Fatalf("put the v6 listener: %v", err)
	}
	ls[0].File.Close()
	if _, err := FindListeners(nsPath, to+1); !errors.Is(err, ErrNoListener) {
		t.Errorf("FindListeners on a port nobody listens on: %v", err)
	}
	// The IPv4 one after: sockops puts it in at listen().
	inNS(t, nsA, func() (err error) {
		lsn4, err = tcpListen("tcp4", "127.0.0.1:"+strconv.Itoa(to))
		return err
	})
	defer lsn4.Close()
	var c uint64
	if err := objs.Listeners().Lookup(bpf.ProxyLsnKey{Netns: cookie, Port: to, Family: 4}, &c); err != nil {
		t.Fatalf("sockops did not put the proxy's IPv4 listener into the map: %v", err)
	}

	prog, err := bpf.LoadProxyLookup("", objs, cookie)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	nl, err := link.AttachNetNs(int(nsA), prog)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()

	// The app, on P.
	app := &appServer{}
	for _, a := range []string{"127.0.0.1", "::1"} {
		var l net.Listener
		inNS(t, nsA, func() (err error) {
			l, err = net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(port)))
			return err
		})
		defer l.Close()
		go app.serve(l)
	}
	px := &testProxy{ns: nsA, mark: mark}
	go px.serve(lsn4)
	go px.serve(lsn6)

	for _, a := range []string{"127.0.0.1", "::1"} {
		dst := netip.MustParseAddrPort(net.JoinHostPort(a, strconv.Itoa(port)))
		if err := exchange(nsA, dst, 1<<20+7); err != nil {
			t.Errorf("%s: %v", dst, err)
		}
	}
	px.mu.Lock()
	if len(px.orig) != 2 || px.orig[0].Port() != port || px.orig[1].Port() != port || px.err != nil {
		t.Errorf("the proxy saw original destinations %v (error %v), want both on port %d", px.orig, px.err, port)
	}
	upstream := px.upstream
	px.mu.Unlock()
	app.mu.Lock()
	if len(app.peers) != 2 || len(upstream) != 2 {
		t.Errorf("the app saw %v, the proxy's upstream connections were %v", app.peers, upstream)
	}
	for _, p := range app.peers {
		if !upstream[p] {
			t.Errorf("the app got a connection from %s, not from the proxy (%v)", p, upstream)
		}
	}
	app.mu.Unlock()
	st := proxyStats(t, objs)
	for n, want := range map[string]uint64{"in_redirected": 2, "in_exempted": 2, "origdst_found": 2, "in_listener_added": 1, "in_no_listener": 0} {
		if st[n] != want {
			t.Errorf("counter %s = %d, want %d (%v)", n, st[n], want, st)
		}
	}
	// STATE_CB removes the proxy's exempt tuples once its sockets close.
	deadline := time.Now().Add(5 * time.Second)
	for mapLen(objs.InExempt()) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := mapLen(objs.InExempt()); n != 0 {
		t.Errorf("%d exempt tuples left after the connections closed", n)
	}

	// The proxy's IPv4 listener closes: it leaves the map, and IPv4
	// connections are refused rather than handed to the app.
	lsn4.Close()
	for time.Now().Before(deadline) && objs.Listeners().Lookup(bpf.ProxyLsnKey{Netns: cookie, Port: to, Family: 4}, &c) == nil {
		time.Sleep(20 * time.Millisecond)
	}
	inNS(t, nsA, func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("a connection to the redirected port went through with the proxy's listener closed")
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("with the proxy's listener closed: %v, want connection refused", err)
		}
		return nil
	})
	if st := proxyStats(t, objs); st["in_no_listener"] != 1 {
		t.Errorf("in_no_listener = %d, want 1", st["in_no_listener"])
	}
	app.mu.Lock()
	if len(app.peers) != 2 {
		t.Errorf("the app got %d connections, want 2", len(app.peers))
	}
	app.mu.Unlock()
}

// tcpListen listens with plain TCP: Go 1.24+ listens with MPTCP by
// default, and a socket map holds TCP sockets only.
func tcpListen(network, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return lc.Listen(context.Background(), network, addr)
}

func proxyStats(t *testing.T, objs *bpf.ProxyObjects) map[string]uint64 {
	t.Helper()
	st, err := ReadProxyStats(objs.Stats())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mapLen(m *ebpf.Map) int {
	var k bpf.ProxyConnKey
	var v uint8
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n
}

// moveToCgroup moves the test process into a fresh cgroup for the test,
// and back afterwards.
func moveToCgroup(t *testing.T) {
	t.Helper()
	root, err := Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	orig := filepath.Join(root, ProcCgroup(os.Getpid()))
	cg := filepath.Join(root, fmt.Sprintf("xlane-proxyin-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), pid, 0); err != nil {
		os.Remove(cg)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(orig, "cgroup.procs"), pid, 0); err != nil {
			t.Errorf("move back to %s: %v", orig, err)
		}
		if err := os.Remove(cg); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
}

func cgroupOf(t *testing.T) string {
	root, err := Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, ProcCgroup(os.Getpid()))
}

// newNetns makes a network namespace (a handle; gone when closed).
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	h, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		panic(err) // this thread stays locked, and dies with the test
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// inNS runs fn on a thread in h (sockets made there belong to h).
func inNS(t *testing.T, h netns.NsHandle, fn func() error) {
	t.Helper()
	if err := doInNS(h, fn); err != nil {
		t.Fatal(err)
	}
}

func doInNS(h netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(h); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return err // the thread stays locked: it ends with its goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// appServer reads a request to EOF, answers its SHA-256 and 300 KiB of
// payload, and records each peer.
type appServer struct {
	mu    sync.Mutex
	peers []string
}

func (a *appServer) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		a.peers = append(a.peers, c.RemoteAddr().String())
		a.mu.Unlock()
		go func() {
			defer c.Close()
			h := sha256.New()
			if _, err := io.Copy(h, c); err != nil {
				return
			}
			c.Write(h.Sum(nil))
			c.Write(testPayload(300 << 10))
		}()
	}
}

func testPayload(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(n))).Read(b)
	return b
}

// exchange sends n random bytes to dst from a socket in h, half-closes,
// and checks the answer: the request's SHA-256, then the app's payload.
func exchange(h netns.NsHandle, dst netip.AddrPort, n int) error {
	var c net.Conn
	if err := doInNS(h, func() (err error) {
		c, err = net.DialTimeout("tcp", dst.String(), 5*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := testPayload(n)
	if _, err := c.Write(req); err != nil {
		return err
	}
	c.(*net.TCPConn).CloseWrite()
	resp, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(req)
	want := testPayload(300 << 10)
	if len(resp) != 32+len(want) || !bytes.Equal(resp[:32], sum[:]) {
		return fmt.Errorf("answer of %d bytes: the app did not get the request intact", len(resp))
	}
	if !bytes.Equal(resp[32:], want) {
		return errors.New("the answer's payload is corrupted")
	}
	return nil
}

// testProxy relays each accepted connection to its SO_ORIGINAL_DST, its
// upstream socket marked (the rule's exemption).
type testProxy struct {
	ns       netns.NsHandle
	mark     int
	mu       sync.Mutex
	orig     []netip.AddrPort
	upstream map[string]bool
	err      error
}

func (p *testProxy) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *testProxy) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go p.relay(c.(*net.TCPConn))
	}
}

func (p *testProxy) relay(c *net.TCPConn) {
	defer c.Close()
	dst, err := OriginalDst(c)
	if err != nil {
		p.fail(fmt.Errorf("SO_ORIGINAL_DST: %w", err))
		return
	}
	p.mu.Lock()
	p.orig = append(p.orig, dst)
	p.mu.Unlock()
	var up net.Conn
	err = doInNS(p.ns, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, p.mark) })
			return serr
		}}
		up, err = d.Dial("tcp", dst.String())
		return err
	})
	if err != nil {
		p.fail(fmt.Errorf("upstream: %w", err))
		return
	}
	defer up.Close()
	p.mu.Lock()
	if p.upstream == nil {
		p.upstream = map[string]bool{}
	}
	p.upstream[up.LocalAddr().String()] = true
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		io.Copy(struct{ io.Writer }{up}, struct{ io.Reader }{c})
		up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	io.Copy(struct{ io.Writer }{c}, struct{ io.Reader }{up})
	c.CloseWrite()
	<-done
}
