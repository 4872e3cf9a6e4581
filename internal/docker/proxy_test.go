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

// TestUDPProxy: two clients' datagrams reach the backend from sockets of
// their own and the answers come back to each from the host port; stop
// closes the port.
func TestUDPProxy(t *testing.T) {
	backend, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := backend.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			backend.WriteToUDPAddrPort(append([]byte(from.String()+" "), buf[:n]...), from)
		}
	}()
	free, _ := net.ListenPacket("udp", "127.0.0.1:0")
	listen := free.LocalAddr().String()
	free.Close()
	p, err := startUDPProxy(listen, backend.LocalAddr().(*net.UDPAddr).AddrPort(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dst := netip.MustParseAddrPort(listen)
		msg := fmt.Sprintf("hello %d", i)
		c.WriteToUDPAddrPort([]byte(msg), dst)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		relay, got, _ := bytes.Cut(buf[:n], []byte(" "))
		if from != dst || string(got) != msg {
			t.Errorf("client %d: %q from %s, want %q from %s", i, got, from, msg, dst)
		}
		seen[string(relay)] = true
	}
	if len(seen) != 2 {
		t.Errorf("the backend saw %v, want one relay socket per client", seen)
	}
	p.stop()
	if c, err := net.ListenPacket("udp", listen); err != nil {
		t.Errorf("port %s still held after stop: %v", listen, err)
	} else {
		c.Close()
	}
}
