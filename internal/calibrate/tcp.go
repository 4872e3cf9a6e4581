package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
)

// chunk is the size of each write: large enough that the probe measures
// the datapath, not the syscall rate.
const chunk = 256 << 10

// TCP sends bulk data over one TCP connection from a socket in the client
// namespace to a listener on dst in the server namespace for d, and returns
// the rate the receiver saw, in bits per second. Sockets belong to the
// namespace they are created in: each is created on a thread switched into
// its namespace, and used from anywhere afterwards.
func TCP(ctx context.Context, server, client netns.NsHandle, dst netip.AddrPort, d time.Duration) (float64, error) {
	var ln net.Listener
	err := inNetns(server, func() (err error) {
		ln, err = net.Listen("tcp", dst.String())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("listen on %s: %w", dst, err)
	}
	defer ln.Close()
	type result struct {
		bytes int64
		span  time.Duration
		err   error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, chunk)
		var n int64
		var start time.Time
		for {
			k, err := c.Read(buf)
			if k > 0 && start.IsZero() {
				start = time.Now()
			}
			n += int64(k)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				got <- result{bytes: n, span: time.Since(start), err: err}
				return
			}
		}
	}()
	var conn net.Conn
	err = inNetns(client, func() (err error) {
		dl := net.Dialer{Timeout: 2 * time.Second}
		conn, err = dl.DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", dst, err)
	}
	buf := make([]byte, chunk)
	deadline := time.Now().Add(d)
	conn.SetWriteDeadline(deadline.Add(2 * time.Second))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := conn.Write(buf); err != nil {
			conn.Close()
			return 0, fmt.Errorf("send to %s: %w", dst, err)
		}
	}
	conn.Close()
	select {
	case r := <-got:
		if r.err != nil {
			return 0, fmt.Errorf("receive on %s: %w", dst, r.err)
		}
		if r.span <= 0 || r.bytes == 0 {
			return 0, fmt.Errorf("receive on %s: no data", dst)
		}
		return float64(r.bytes) * 8 / r.span.Seconds(), nil
	case <-time.After(5 * time.Second):
		return 0, fmt.Errorf("receive on %s: no end of stream 5 s after the sender stopped", dst)
	}
}

// inNetns runs fn on a thread switched into ns.
func inNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if serr := netns.Set(orig); serr != nil {
			// The thread stays in ns: keep it locked so Go retires it.
			errc <- errors.Join(err, serr)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// NewNetns creates an anonymous network namespace, alive while the
// returned handle is open, and returns it with a path that opens it
// (/proc/PID/fd/FD) for code that takes paths. Nothing is bind-mounted in
// /var/run/netns: a process killed while using it leaves nothing behind.
// The calling thread stays where it was.
func NewNetns() (netns.NsHandle, string, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return netns.None(), "", err
	}
	defer orig.Close()
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		// The thread stays in the new namespace: keep it locked so Go
		// retires it when its goroutine ends.
		if err == nil {
			ns.Close()
		}
		return netns.None(), "", errors.Join(err, serr)
	}
	runtime.UnlockOSThread()
	if err != nil {
		return netns.None(), "", fmt.Errorf("create netns: %w", err)
	}
	return ns, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns)), nil
}
