package docker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestPortProxy(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }() // echo until the client half-closes
		}
	}()
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	port := uint16(free.Addr().(*net.TCPAddr).Port)
	free.Close()
	p, err := startProxy(fmt.Sprintf(":%d", port), backend.Addr().(*net.TCPAddr).AddrPort(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	msg := bytes.Repeat([]byte("xlane"), 100000)
	go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("relayed %d of %d bytes: %v", len(got), len(msg), err)
	}
	// stop closes the listener and open relays.
	c2, err := net.Dial("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	p.stop()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c2); err != nil {
		t.Errorf("open relay after stop: %v, want EOF", err)
	}
	if _, err := net.DialTimeout("tcp", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port).String(), time.Second); err == nil {
		t.Errorf("port %d still accepts after stop", port)
	}
}
