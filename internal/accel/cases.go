package accel

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/btf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// testCase is one correctness case of the self-test. mustRedirect: the
// case fails unless the fast path carried some of its bytes (proof that
// the test tested acceleration at all).
type testCase struct {
	name         string
	mustRedirect bool
	run          func(e *env, timeout time.Duration) error
}

// cases, in the order they run. docs/accel.md describes each.
var cases = []testCase{
	{"large-write", true, func(e *env, t time.Duration) error { return oneWay(e, "tcp4", "127.0.0.1:0", e.large, t) }},
	{"ipv6", true, func(e *env, t time.Duration) error { return oneWay(e, "tcp6", "[::1]:0", 4<<20, t) }},
	{"msg-more", true, caseMsgMore},
	{"close", true, caseClose},
	{"half-close", true, caseHalfClose},
	{"rst", false, caseRST},
	{"sendfile", false, caseSendfile},
	{"splice", false, caseSplice},
	{"fionread", false, caseFIONREAD},
	{"ping-pong", true, casePingPong},
	{"short-conns", true, caseShortConns},
	{"tuple-reuse", false, caseTupleReuse},
	{"other-netns", false, caseOtherNetns},
	{"pre-existing", false, casePreExisting},
	{"disable-under-load", false, caseDisableUnderLoad},
	{"leave-map", false, caseLeaveMap},
	{"backpressure", true, caseBackpressure},
	{"relay", true, caseRelay},
	{"small-stream", true, caseSmallStream},
	{"epollet", true, caseEpollET},
}

// CaseNames lists the self-test's cases in the order they run.
func CaseNames() []string {
	var n []string
	for _, c := range cases {
		n = append(n, c.name)
	}
	return n
}

// payload is n deterministic pseudo-random bytes.
func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 1})
	r.Read(b)
	return b
}

// same compares what arrived with what was sent, by SHA-256.
func same(what string, got, want []byte) error {
	if sha256.Sum256(got) == sha256.Sum256(want) {
		return nil
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Errorf("%s: got %d bytes, sent %d, first difference at byte %d", what, len(got), len(want), i)
}

// pair connects a client to a new listener on addr and returns both ends,
// with deadlines.
func pair(network, addr string, timeout time.Duration) (c, s *net.TCPConn, err error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	return dialAccept(l.(*net.TCPListener), network, timeout, nil)
}

func dialAccept(l *net.TCPListener, network string, timeout time.Duration, d *net.Dialer) (c, s *net.TCPConn, err error) {
	if d == nil {
		d = &net.Dialer{}
	}
	d.Timeout = timeout
	l.SetDeadline(time.Now().Add(timeout))
	type res struct {
		c   *net.TCPConn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		a, err := l.AcceptTCP()
		ch <- res{a, err}
	}()
	cc, err := d.Dial(network, l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	r := <-ch
	if r.err != nil {
		cc.Close()
		return nil, nil, r.err
	}
	c = cc.(*net.TCPConn)
	dl := time.Now().Add(timeout)
	c.SetDeadline(dl)
	r.c.SetDeadline(dl)
	return c, r.c, nil
}

// readAll reads r to EOF in a goroutine; the result arrives on the channel.
func readAll(r io.Reader) chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- readResult{b, err}
	}()
	return ch
}

type readResult struct {
	b   []byte
	err error
}

// received waits for readAll's result and checks it against want.
func received(got chan readResult, what string, want []byte) error {
	r := <-got
	if r.err != nil {
		return fmt.Errorf("read: %w (%d of %d bytes)", r.err, len(r.b), len(want))
	}
	return same(what, r.b, want)
}

func oneWay(e *env, network, addr string, n int, timeout time.Duration) error {
	c, s, err := pair(network, addr, timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	p := payload(n, uint64(n))
	got := readAll(s)
	if _, err := c.Write(p); err != nil {
		c.Close()
		return fmt.Errorf("write: %w", err)
	}
	c.Close()
	return received(got, "received", p)
}

// sendAll sends b on the socket with flags, waiting when it is full.
func sendAll(c *net.TCPConn, b []byte, flags int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	for len(b) > 0 {
		var n int
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			n, serr = unix.SendmsgN(int(fd), b, nil, nil, flags|unix.MSG_DONTWAIT)
			return serr != unix.EAGAIN
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func caseMsgMore(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	p := payload(4<<20, 7)
	got := readAll(s)
	r := rand.New(rand.NewPCG(1, 2))
	for off := 0; off < len(p); {
		n := min(1+r.IntN(65536), len(p)-off)
		flags := unix.MSG_MORE
		if off+n == len(p) {
			flags = 0
		}
		if err := sendAll(c, p[off:off+n], flags); err != nil {
			c.Close()
			return fmt.Errorf("send: %w", err)
		}
		off += n
	}
	c.Close()
	return received(got, "received", p)
}

// caseClose: the sender closes at once after writing; everything written
// must still arrive, then EOF.
func caseClose(e *env, timeout time.Duration) error {
	for i := range 20 {
		c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
		if err != nil {
			return err
		}
		p := payload(256<<10, uint64(i))
		got := readAll(s)
		_, err = c.Write(p)
		c.Close()
		res := <-got
		s.Close()
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		if res.err != nil {
			return fmt.Errorf("read: %w", res.err)
		}
		if err := same(fmt.Sprintf("connection %d", i), res.b, p); err != nil {
			return err
		}
	}
	return nil
}

// caseHalfClose: shutdown(SHUT_WR) with data in flight; the other side
// reads to EOF, then answers on the half-open connection.
func caseHalfClose(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	req, resp := payload(2<<20, 11), payload(2<<20, 12)
	got := readAll(s)
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	res := <-got
	if res.err != nil {
		return fmt.Errorf("server read: %w", res.err)
	}
	if err := same("request", res.b, req); err != nil {
		return err
	}
	back := readAll(c)
	if _, err := s.Write(resp); err != nil {
		return fmt.Errorf("answer on the half-closed connection: %w", err)
	}
	s.Close()
	res = <-back
	if res.err != nil {
		return fmt.Errorf("client read: %w", res.err)
	}
	return same("response", res.b, resp)
}

// caseRST: a reset with data in flight may lose the unread data (as on
// the normal path) but must never hang the reader or hand it wrong bytes.
func caseRST(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	first, second := payload(1<<20, 21), payload(1<<20, 22)
	if _, err := c.Write(first); err != nil {
		return err
	}
	b := make([]byte, len(first))
	if _, err := io.ReadFull(s, b); err != nil {
		return fmt.Errorf("read before the reset: %w", err)
	}
	if err := same("before the reset", b, first); err != nil {
		return err
	}
	if _, err := c.Write(second); err != nil {
		return err
	}
	c.SetLinger(0)
	c.Close()
	res := <-readAll(s)
	if res.err != nil && !errors.Is(res.err, syscall.ECONNRESET) {
		return fmt.Errorf("read after the reset: %w", res.err)
	}
	if len(res.b) > len(second) || !bytes.Equal(res.b, second[:len(res.b)]) {
		return fmt.Errorf("after the reset: %d bytes that are not what was sent", len(res.b))
	}
	return nil
}

func caseSendfile(e *env, timeout time.Duration) error {
	p := payload(8<<20, 31)
	f, err := os.CreateTemp("", "xlane-accel-sendfile-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(p); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	got := readAll(s)
	_, err = io.Copy(c, f) // *net.TCPConn.ReadFrom(*os.File): sendfile(2)
	c.Close()
	if err != nil {
		return fmt.Errorf("sendfile: %w", err)
	}
	return received(got, "received", p)
}

// caseSplice: a relay that moves one TCP connection into another with
// Go's io.Copy, which splices (splice(2) from the accelerated socket).
func caseSplice(e *env, timeout time.Duration) error {
	p := payload(4<<20, 41)
	return viaRelay(timeout, p, "through io.Copy",
		func(b, a *net.TCPConn) error {
			_, err := io.Copy(b, a) // b.ReadFrom(a): splice(2)
			return err
		},
		func(c *net.TCPConn) error {
			if _, err := c.Write(p); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			return nil
		})
}

// viaRelay connects a client c to a relay's end a and the relay's other
// end b to a sink, runs relay(b, a) in a goroutine (then closes b), has
// write(c) send p and closes c; the sink must get p, in order.
func viaRelay(timeout time.Duration, p []byte, what string, relay func(b, a *net.TCPConn) error, write func(c *net.TCPConn) error) error {
	c, a, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer a.Close()
	b, sink, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		c.Close()
		return err
	}
	defer sink.Close()
	got := readAll(sink)
	relayed := make(chan error, 1)
	go func() {
		err := relay(b, a)
		b.Close()
		relayed <- err
	}()
	werr := write(c)
	c.Close()
	if werr != nil {
		return werr
	}
	res := <-got
	if rerr := <-relayed; rerr != nil {
		return fmt.Errorf("relay: %w (the sink got %d of %d bytes)", rerr, len(res.b), len(p))
	}
	if res.err != nil {
		return fmt.Errorf("sink read: %w", res.err)
	}
	return same(what, res.b, p)
}

// caseFIONREAD: ioctl(FIONREAD) must count data that is waiting,
// redirected or not.
func caseFIONREAD(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	p := payload(64<<10, 51)
	if _, err := c.Write(p); err != nil {
		return err
	}
	rc, err := s.SyscallConn()
	if err != nil {
		return err
	}
	n := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if err != nil {
			return fmt.Errorf("FIONREAD: %w", err)
		}
		if n == len(p) {
			break
		}
	}
	b := make([]byte, len(p))
	if _, err := io.ReadFull(s, b); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := same("received", b, p); err != nil {
		return err
	}
	if n != len(p) {
		return fmt.Errorf("FIONREAD said %d with %d bytes waiting", n, len(p))
	}
	return nil
}

func casePingPong(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	echo := make(chan error, 1)
	go func() {
		_, err := io.Copy(onlyWriter{s}, onlyReader{s})
		s.Close()
		echo <- err
	}()
	small := e.stat("fallback_small_stream")
	b := make([]byte, 64)
	for i := range 2000 {
		p := payload(64, uint64(i))
		if _, err := c.Write(p); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		if !bytes.Equal(b, p) {
			return fmt.Errorf("round %d: wrong answer", i)
		}
	}
	c.CloseWrite()
	if err := <-echo; err != nil {
		return err
	}
	// Ping-pong never leaves a backlog: no small-stream fallback.
	if n := e.stat("fallback_small_stream") - small; n != 0 {
		return fmt.Errorf("fallback_small_stream went up by %d in ping-pong", n)
	}
	return nil
}

// onlyReader and onlyWriter hide ReadFrom/WriteTo: a plain read/write
// loop, no splice.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

func caseShortConns(e *env, timeout time.Duration) error {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	go func() {
		for {
			s, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				s.SetDeadline(time.Now().Add(timeout))
				io.Copy(onlyWriter{s}, onlyReader{s})
				s.Close()
			}()
		}
	}()
	for i := range 200 {
		cc, err := net.DialTimeout("tcp4", l.Addr().String(), timeout)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		c := cc.(*net.TCPConn)
		c.SetDeadline(time.Now().Add(timeout))
		p := payload(4096, uint64(i))
		got := readAll(c)
		_, err = c.Write(p)
		c.CloseWrite()
		res := <-got
		c.Close()
		if err != nil || res.err != nil {
			return fmt.Errorf("connection %d: %v %v", i, err, res.err)
		}
		if err := same(fmt.Sprintf("connection %d", i), res.b, p); err != nil {
			return err
		}
	}
	return nil
}

// caseTupleReuse: the same 4-tuple, connection after connection.
func caseTupleReuse(e *env, timeout time.Duration) error {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
			return serr
		}}
	for i := range 20 {
		c, s, err := dialAccept(l.(*net.TCPListener), "tcp4", timeout, d)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		req, resp := payload(64<<10, uint64(2*i)), payload(64<<10, uint64(2*i+1))
		got := readAll(s)
		c.Write(req)
		c.CloseWrite()
		res := <-got
		if err := same(fmt.Sprintf("request %d", i), res.b, req); err != nil {
			return err
		}
		back := readAll(c)
		s.Write(resp)
		s.Close()
		res = <-back
		if err := same(fmt.Sprintf("response %d", i), res.b, resp); err != nil {
			return err
		}
		c.SetLinger(0) // no TIME_WAIT: the next connection takes the same tuple
		c.Close()
	}
	return nil
}

// both writes a and b over c and s in opposite directions at once and
// checks both arrive.
func both(c, s *net.TCPConn, a, b []byte) error {
	var wg sync.WaitGroup
	var ea, eb error
	ra, rb := make([]byte, len(a)), make([]byte, len(b))
	wg.Add(2)
	go func() { defer wg.Done(); _, ea = io.ReadFull(s, ra) }()
	go func() { defer wg.Done(); _, eb = io.ReadFull(c, rb) }()
	_, wa := c.Write(a)
	_, wb := s.Write(b)
	wg.Wait()
	if err := errors.Join(wa, wb, ea, eb); err != nil {
		return err
	}
	return errors.Join(same("client to server", ra, a), same("server to client", rb, b))
}

// caseOtherNetns: the server in a second network namespace, over a veth.
func caseOtherNetns(e *env, timeout time.Duration) error {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlst0"}, PeerName: "xlst1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth: %w", err)
	}
	defer netlink.LinkDel(veth)
	type res struct {
		l   net.Listener
		err error
	}
	ch, done := make(chan res, 1), make(chan struct{})
	defer close(done)
	nsReady := make(chan int, 1)
	linkMoved := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			nsReady <- -1
			ch <- res{nil, err}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			nsReady <- -1
			ch <- res{nil, err}
			return
		}
		nsReady <- fd
		<-linkMoved
		err = func() error {
			for _, n := range []string{"lo", "xlst1"} {
				l, err := netlink.LinkByName(n)
				if err != nil {
					return err
				}
				if n == "xlst1" {
					a, _ := netlink.ParseAddr("10.251.0.2/24")
					if err := netlink.AddrAdd(l, a); err != nil {
						return err
					}
				}
				if err := netlink.LinkSetUp(l); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		l, err := net.Listen("tcp4", "10.251.0.2:0")
		ch <- res{l, err}
		<-done
	}()
	fd := <-nsReady
	if fd < 0 {
		return fmt.Errorf("second netns: %w", (<-ch).err)
	}
	defer unix.Close(fd)
	peer, err := netlink.LinkByName("xlst1")
	if err == nil {
		err = netlink.LinkSetNsFd(peer, fd)
	}
	if err != nil {
		close(linkMoved)
		return fmt.Errorf("move veth: %w", err)
	}
	close(linkMoved)
	a, _ := netlink.ParseAddr("10.251.0.1/24")
	if err := netlink.AddrAdd(veth, a); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	r := <-ch
	if r.err != nil {
		return fmt.Errorf("listen in the second netns: %w", r.err)
	}
	defer r.l.Close()
	c, s, err := dialAccept(r.l.(*net.TCPListener), "tcp4", timeout, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	return both(c, s, payload(4<<20, 61), payload(4<<20, 62))
}

// casePreExisting: a connection established while acceleration was off
// carries on correctly once it is on.
func casePreExisting(e *env, timeout time.Duration) error {
	if err := SetOn(e.config, false); err != nil {
		return err
	}
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	if err := both(c, s, payload(1<<20, 71), payload(1<<20, 72)); err != nil {
		return err
	}
	if err := SetOn(e.config, true); err != nil {
		return err
	}
	return both(c, s, payload(4<<20, 73), payload(4<<20, 74))
}

// caseDisableUnderLoad: acceleration is switched off in the middle of a
// transfer in both directions.
func caseDisableUnderLoad(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	a, b := payload(16<<20, 81), payload(16<<20, 82)
	var wg sync.WaitGroup
	var ea, eb, wa, wb error
	ra, rb := make([]byte, len(a)), make([]byte, len(b))
	wg.Add(4)
	go func() { defer wg.Done(); _, ea = io.ReadFull(s, ra) }()
	go func() { defer wg.Done(); _, eb = io.ReadFull(c, rb) }()
	go func() { defer wg.Done(); wa = writeChunks(c, a, 64<<10) }()
	go func() { defer wg.Done(); wb = writeChunks(s, b, 64<<10) }()
	time.Sleep(2 * time.Millisecond)
	off := SetOn(e.config, false)
	wg.Wait()
	if err := errors.Join(off, wa, wb, ea, eb); err != nil {
		return err
	}
	return errors.Join(same("client to server", ra, a), same("server to client", rb, b))
}

// writeChunks writes p in write()s of n bytes.
func writeChunks(c *net.TCPConn, p []byte, n int) error {
	for off := 0; off < len(p); off += n {
		if _, err := c.Write(p[off:min(off+n, len(p))]); err != nil {
			return err
		}
	}
	return nil
}

// caseLeaveMap: both sockets leave the socket map (as at uninstall) with
// the connection open; it carries on over the normal path.
func caseLeaveMap(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	if err := both(c, s, payload(1<<20, 91), payload(1<<20, 92)); err != nil {
		return err
	}
	if err := clearMap(e.socks); err != nil {
		return err
	}
	return both(c, s, payload(4<<20, 93), payload(4<<20, 94))
}

// caseBackpressure: a reader that stops reading must stop its writer, as
// on the normal path. The redirect path has no flow control of its own:
// without the programs' max_backlog fence, every write succeeds until the
// node's TCP memory runs out and write() fails with ENOMEM. The writer
// sends 1 MiB pieces without blocking until the socket says EAGAIN for
// good; more than max_backlog plus the two sockets' normal buffers is a
// failure. Then the writer closes and the reader reads everything written,
// in order.
func caseBackpressure(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	// What the normal path may buffer: the sender's and the receiver's
	// largest buffers, and one message (at most 17 pages of 32 KiB) past
	// the fence.
	bound := e.backlog + sysctlMax("tcp_wmem", 4<<20) + sysctlMax("tcp_rmem", 6<<20) + 1<<20
	limit := bound + 16<<20
	p := payload(limit, 101)
	sent, err := sendUntilFull(c, p, 1<<20, 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("write with the reader stopped, after %d bytes: %w", sent, err)
	}
	if sent > bound {
		return fmt.Errorf("no backpressure: %d MiB written with the reader stopped, the normal path holds at most about %d MiB",
			sent>>20, bound>>20)
	}
	got := readAll(s)
	c.Close()
	return received(got, "received", p[:sent])
}

// caseEpollET: a reader as nginx reads (epoll, EPOLLET; at most 1 MiB per
// turn of its loop, at a client's pace; a short read or EAGAIN taken as
// "drained" until the next edge) behind a writer that got max_backlog
// ahead of it (its direction falls back, fallback_backlog) and then
// finished: every byte must arrive, with no wait of more than `stall` for
// an edge. Issue 36 §1: nginx stalled for good so. On 6.18 the read that
// empties the redirect queue is short while the rest waits in the TCP
// receive queue, whose edges came while the reader was still reading the
// redirect queue, and the writer has nothing left to send: no edge comes.
func caseEpollET(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	rc, err := s.SyscallConn()
	if err != nil {
		return err
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(ep)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	stall := max(time.Second, timeout/4)
	p := payload(e.backlog+8<<20, 103)
	var written atomic.Int64
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < len(p); off += 64 << 10 {
			n, err := c.Write(p[off:min(off+64<<10, len(p))])
			written.Add(int64(n))
			if err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	// The reader starts once the writer is max_backlog ahead, or stopped
	// by the window (100 ms without progress: the normal path, where it
	// never gets that far).
	for last, since := int64(-1), time.Now(); written.Load() < int64(e.backlog); time.Sleep(5 * time.Millisecond) {
		if w := written.Load(); w != last {
			last, since = w, time.Now()
		} else if time.Since(since) > 100*time.Millisecond {
			break
		}
	}
	sent := len(p)
	got := make([]byte, 0, sent)
	buf := make([]byte, 65521) // a prime: the last read of a queue is short
	evs := make([]unix.EpollEvent, 1)
	ready := false
	for len(got) < sent {
		wait := int(stall.Milliseconds())
		if ready {
			wait = 0
		}
		n, err := unix.EpollWait(ep, evs, wait)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 && !ready {
			return fmt.Errorf("an edge-triggered reader got %d of %d bytes, then no wakeup for %v (a short read taken as drained, the rest in the TCP receive queue: nginx stalls so)", len(got), sent, stall)
		}
		ready = true
		for quota := 1 << 20; quota > 0 && len(got) < sent; {
			r, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				ready = false
				break
			}
			if err != nil {
				return fmt.Errorf("read after %d bytes: %w", len(got), err)
			}
			if r == 0 {
				return fmt.Errorf("EOF after %d of %d bytes", len(got), sent)
			}
			got = append(got, buf[:r]...)
			quota -= r
			if r < len(buf) {
				ready = false
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // the client's pace
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if !bytes.Equal(got, p) {
		return fmt.Errorf("%d bytes received differ from the %d sent", len(got), sent)
	}
	return nil
}

// sendUntilFull writes p in pieces of n bytes without blocking until the
// socket stays full (EAGAIN) for quiet, or p is sent; it returns how much
// was sent.
func sendUntilFull(c *net.TCPConn, p []byte, n int, quiet time.Duration) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	sent := 0
	full := time.Time{}
	for sent < len(p) {
		var w int
		var werr error
		rc.Control(func(fd uintptr) {
			w, werr = unix.SendmsgN(int(fd), p[sent:min(sent+n, len(p))], nil, nil, unix.MSG_DONTWAIT)
		})
		if errors.Is(werr, unix.EAGAIN) {
			if full.IsZero() {
				full = time.Now()
			} else if time.Since(full) > quiet {
				return sent, nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if werr != nil {
			return sent, werr
		}
		full = time.Time{}
		sent += w
	}
	return sent, nil
}

// sysctlMax is the largest of net.ipv4.NAME's three values (tcp_rmem,
// tcp_wmem), or def.
func sysctlMax(name string, def int) int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return def
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return def
	}
	v, err := strconv.Atoi(f[2])
	if err != nil {
		return def
	}
	return v
}

// caseRelay: the write-up's chain, client -> relay -> sink, every leg
// accelerated; the relay (a plain read/write loop, as a proxy) copies
// twice per byte, so the client outruns it, and it starts reading late.
// The client writes more than max_backlog in 1 MiB pieces (its leg falls
// back to the normal path in the middle), then its large write in one
// write(); no write may fail (ENOMEM was the symptom) and the sink must get
// every byte in order.
func caseRelay(e *env, timeout time.Duration) error {
	pieces := max(e.large/4, e.backlog+4<<20)
	p := payload(pieces+e.large, 111)
	return viaRelay(timeout, p, "through the relay",
		func(b, a *net.TCPConn) error {
			time.Sleep(100 * time.Millisecond)
			_, err := io.Copy(onlyWriter{b}, onlyReader{a})
			return err
		},
		func(c *net.TCPConn) error {
			err := writeChunks(c, p[:pieces], 1<<20)
			if err == nil {
				_, err = c.Write(p[pieces:])
			}
			if err != nil {
				return fmt.Errorf("client write: %w", err)
			}
			return nil
		})
}

// caseSmallStream: a stream of 64-byte writes to a reader that starts
// 200 ms late. Its backlog passes small_backlog, so the direction falls
// back for good (fallback_small_stream) where the kernel counts the
// peer's unread bytes (msg_tot_len, 6.12+); elsewhere nothing changes.
// Either way every byte arrives in order (SHA-256).
func caseSmallStream(e *env, timeout time.Duration) error {
	c, s, err := pair("tcp4", "127.0.0.1:0", timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	defer s.Close()
	before := e.stat("fallback_small_stream")
	p := payload(1<<20, 121)
	got := make(chan chan readResult, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		got <- readAll(s)
	}()
	if err := writeChunks(c, p, 64); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	c.CloseWrite()
	if err := received(<-got, "received", p); err != nil {
		return err
	}
	if e.stats == nil {
		return nil // the caller reads the daemon's counters
	}
	n := e.stat("fallback_small_stream") - before
	counts, err := kernelCountsUnread()
	if err != nil {
		return err
	}
	if counts && n != 1 {
		return fmt.Errorf("fallback_small_stream went up by %d, want 1 (the kernel has msg_tot_len)", n)
	}
	if !counts && n != 0 {
		return fmt.Errorf("fallback_small_stream went up by %d without msg_tot_len", n)
	}
	return nil
}

// kernelCountsUnread: does the running kernel's struct sk_psock have
// msg_tot_len (the count the small-stream and backlog rules read)?
func kernelCountsUnread() (bool, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false, fmt.Errorf("kernel BTF: %w", err)
	}
	var st *btf.Struct
	if err := spec.TypeByName("sk_psock", &st); err != nil {
		return false, fmt.Errorf("kernel BTF: struct sk_psock: %w", err)
	}
	for _, m := range st.Members {
		if m.Name == "msg_tot_len" {
			return true, nil
		}
	}
	return false, nil
}
