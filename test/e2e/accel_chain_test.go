package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/accel"
	"golang.org/x/sys/unix"
)

// TestAccelChain: the write-up's chain, client -> transparent proxy ->
// server on loopback, both legs accelerated, with 1 MiB writes and one
// 64 MiB write, every transfer SHA-256 checked by the server. The relay
// starts reading each connection late, so its client leg piles up more
// than the programs' max_backlog: that direction must fall back to the
// normal path (fallback_backlog) instead of queueing without limit, which
// ended in write() failing with ENOMEM (docs/accel.md).
func TestAccelChain(t *testing.T) {
	n := newNode(t, accelTestNode)
	cg := newCgroup(t, "")
	netns := newNetns(t, "ch")
	runIn(t, netns, "ip", "link", "set", "lo", "up")
	enableAccel(t, n, cg)
	const port, to, mark = 8090, 15090, 0x539
	n.mustXlane(nil, "proxy", "redirect", "--port", strconv.Itoa(port), "--to", strconv.Itoa(to), "--cgroup", cg,
		"--exempt", "mark", "--mark", strconv.Itoa(mark))
	relay := helper(t, cg, netns, "relay", relayArg{Port: to, Mark: mark, DelayMs: 300})
	rout, _ := relay.StdoutPipe()
	var rerr bytes.Buffer
	relay.Stderr = &rerr
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Process.Kill(); relay.Wait() })
	if _, err := rout.Read(make([]byte, 6)); err != nil {
		t.Fatalf("relay: %v\n%s", err, rerr.String())
	}
	before := accelStatus(n).Counters
	start := time.Now()
	client := helper(t, cg, netns, "chain", chainArg{Port: port, Transfers: []chainTransfer{
		{Addr: "127.0.0.1", Piece: 1 << 20, Total: 64 << 20},
		{Addr: "127.0.0.1", Piece: 64 << 20, Total: 64 << 20},
		{Addr: "::1", Piece: 1 << 20, Total: 16 << 20},
	}})
	if o, err := client.CombinedOutput(); err != nil {
		t.Fatalf("transfers through the chain: %v\n%s\nrelay: %s", err, o, rerr.String())
	} else {
		t.Logf("%s(%v)", o, time.Since(start))
	}
	after := accelStatus(n).Counters
	d := func(k string) uint64 { return after[k] - before[k] }
	t.Logf("counters during the transfers: bytes_redirected %d, fallback_backlog %d, fallback_bytes %d, fallback_no_peer %d",
		d("bytes_redirected"), d("fallback_backlog"), d("fallback_bytes"), d("fallback_no_peer"))
	if d("bytes_redirected") < 64<<20 {
		t.Errorf("the fast path carried %d bytes, want at least 64 MiB", d("bytes_redirected"))
	}
	if d("fallback_backlog") == 0 {
		t.Errorf("the relay read late, yet no direction fell back for its backlog: %v", after)
	}
	if rerr.Len() > 0 {
		t.Errorf("relay: %s", rerr.String())
	}
	n.mustXlane(nil, "proxy", "rm", strconv.Itoa(port))
	n.mustXlane(nil, "accel", "disable")
}

// relayArg: a TCP relay for transparent redirects (the benchmark's proxy):
// it listens on 127.0.0.1:Port and [::1]:Port, connects each connection to
// its SO_ORIGINAL_DST with SO_MARK Mark, waits DelayMs, then copies both
// ways with plain read/write loops (no splice, docs/accel.md).
type relayArg struct {
	Port    int    `json:"port"`
	Mark    uint32 `json:"mark"`
	DelayMs int    `json:"delay_ms"`
}

func helperRelay(a relayArg) error {
	errc := make(chan error, 2)
	for _, addr := range []string{"127.0.0.1", "::1"} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(a.Port)))
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					errc <- err
					return
				}
				go relayConn(c.(*net.TCPConn), a)
			}
		}()
	}
	fmt.Println("ready")
	return <-errc
}

func relayConn(c *net.TCPConn, a relayArg) {
	defer c.Close()
	dst, err := accel.OriginalDst(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay: SO_ORIGINAL_DST:", err)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(a.Mark)) })
		return serr
	}}
	u, err := d.Dial("tcp", dst.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return
	}
	up := u.(*net.TCPConn)
	defer up.Close()
	time.Sleep(time.Duration(a.DelayMs) * time.Millisecond)
	done := make(chan struct{})
	go func() {
		if _, err := io.Copy(onlyWriter{up}, onlyReader{c}); err != nil {
			fmt.Fprintln(os.Stderr, "relay: client to server:", err)
		}
		up.CloseWrite()
		close(done)
	}()
	if _, err := io.Copy(onlyWriter{c}, onlyReader{up}); err != nil {
		fmt.Fprintln(os.Stderr, "relay: server to client:", err)
	}
	c.CloseWrite()
	<-done
}

// chainArg: serve on Port (127.0.0.1 and ::1): read a connection to EOF,
// answer its SHA-256 and length; then, for each transfer, connect to
// Addr:Port (redirected to the relay, where the test redirects it), write
// Total bytes in write()s of Piece bytes, shut down the write side and
// check the answer.
type chainArg struct {
	Port      int             `json:"port"`
	Transfers []chainTransfer `json:"transfers"`
}

type chainTransfer struct {
	Addr  string `json:"addr"`
	Piece int    `json:"piece"`
	Total int    `json:"total"`
	// PaceUs: wait this long after each write (a writer its reader keeps
	// up with: its direction never falls back for backlog).
	PaceUs int `json:"pace_us,omitempty"`
}

func helperChain(a chainArg) error {
	if lo, err := net.InterfaceByName("lo"); err != nil {
		return err
	} else if lo.Flags&net.FlagUp == 0 {
		if err := exec.Command("ip", "link", "set", "lo", "up").Run(); err != nil {
			return fmt.Errorf("bring lo up: %w", err)
		}
	}
	for _, addr := range []string{"127.0.0.1", "::1"} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(a.Port)))
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					h := sha256.New()
					n, err := io.Copy(h, onlyReader{c})
					if err != nil {
						fmt.Fprintln(os.Stderr, "server read:", err)
						return
					}
					c.Write(binary.BigEndian.AppendUint64(h.Sum(nil), uint64(n)))
				}()
			}
		}()
	}
	for i, tr := range a.Transfers {
		if err := chainTransferRun(a.Port, tr); err != nil {
			return fmt.Errorf("transfer %d (%s, %d bytes in writes of %d): %w", i, tr.Addr, tr.Total, tr.Piece, err)
		}
		fmt.Printf("transfer %d (%s, %d MiB in writes of %d KiB): ok\n", i, tr.Addr, tr.Total>>20, tr.Piece>>10)
	}
	return nil
}

func chainTransferRun(port int, tr chainTransfer) error {
	cc, err := net.DialTimeout("tcp", net.JoinHostPort(tr.Addr, strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		return err
	}
	c := cc.(*net.TCPConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	p := accelPayload(tr.Total)
	for off := 0; off < len(p); off += tr.Piece {
		if _, err := c.Write(p[off:min(off+tr.Piece, len(p))]); err != nil {
			return fmt.Errorf("write at byte %d: %w", off, err)
		}
		if tr.PaceUs > 0 {
			time.Sleep(time.Duration(tr.PaceUs) * time.Microsecond)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	ans, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	want := sha256.Sum256(p)
	if len(ans) != 40 {
		return fmt.Errorf("answer of %d bytes, want 40", len(ans))
	}
	if got := binary.BigEndian.Uint64(ans[32:]); got != uint64(len(p)) || !bytes.Equal(ans[:32], want[:]) {
		return fmt.Errorf("the server got %d bytes, sent %d, SHA-256 match %v", got, len(p), bytes.Equal(ans[:32], want[:]))
	}
	return nil
}
