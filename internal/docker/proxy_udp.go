package docker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// udpIdle is how long a UDP relay keeps a client's flow without an answer
// from the container (docker-proxy keeps its UDP flows 90 s).
const udpIdle = 90 * time.Second

// udpProxy relays the datagrams sent to one host port to target: one socket
// towards the target per client address, whose answers go back to that
// client from the host port, as docker-proxy relays a bridge's UDP ports.
type udpProxy struct {
	c      *net.UDPConn
	target netip.AddrPort
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.Mutex
	flows  map[netip.AddrPort]*net.UDPConn
	closed bool
}

// startUDPProxy relays what is sent to listen (":PORT" for every address
// of the node, or HOST:PORT) to target.
func startUDPProxy(listen string, target netip.AddrPort, log *slog.Logger) (*udpProxy, error) {
	addr, err := net.ResolveUDPAddr("udp", listen)
	if err == nil {
		var c *net.UDPConn
		if c, err = net.ListenUDP("udp", addr); err == nil {
			p := &udpProxy{c: c, target: target, log: log, flows: map[netip.AddrPort]*net.UDPConn{}}
			p.wg.Add(1)
			go p.serve()
			return p, nil
		}
	}
	return nil, fmt.Errorf("port %s/udp on the node: %w", strings.TrimPrefix(listen, ":"), err)
}

func (p *udpProxy) serve() {
	defer p.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := p.c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("docker: udp port proxy read", "port", p.c.LocalAddr(), "err", err)
			}
			return
		}
		out := p.flow(from)
		if out == nil {
			continue
		}
		out.Write(buf[:n])
	}
}

// flow returns the socket towards the target of client from, opening it
// (and the goroutine carrying its answers back) on the first datagram.
func (p *udpProxy) flow(from netip.AddrPort) *net.UDPConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if out, ok := p.flows[from]; ok || p.closed {
		return out
	}
	out, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(p.target))
	if err != nil {
		p.log.Debug("docker: udp port proxy dial", "target", p.target, "err", err)
		return nil
	}
	p.flows[from] = out
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.drop(from, out)
		buf := make([]byte, 65535)
		for {
			out.SetReadDeadline(time.Now().Add(udpIdle))
			n, err := out.Read(buf)
			if err != nil {
				return // idle, refused or closed
			}
			if _, err := p.c.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return
			}
		}
	}()
	return out
}

func (p *udpProxy) drop(from netip.AddrPort, out *net.UDPConn) {
	p.mu.Lock()
	if p.flows[from] == out {
		delete(p.flows, from)
	}
	p.mu.Unlock()
	out.Close()
}

// stop closes the host port and every flow.
func (p *udpProxy) stop() {
	p.c.Close()
	p.mu.Lock()
	p.closed = true
	for _, out := range p.flows {
		out.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
