package docker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The datapath publishes a port where packets arrive: on the uplink (from
// off the node), on the endpoints' veths (from containers), and, for the
// node's own processes, at connect() to the uplink's address (cgroup hooks,
// bpf/sock_lb.c). A connection the node opens to another of its addresses
// (curl localhost:8080) passes none of these, so, as Docker's docker-proxy
// does for a bridge, a TCP relay in xlaned listens on the host port and
// forwards to the container. Holding the port also keeps a node service from
// taking it unnoticed. A port Docker binds to one host address (-p
// 127.0.0.1:8082:80) has only its relay, listening on that address. UDP
// ports have the same, in proxy_udp.go.

// portProxy relays connections to one host port to target.
type portProxy struct {
	ln     net.Listener
	target netip.AddrPort
	log    *slog.Logger
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// startProxy relays what connects to listen (":PORT" for every address of
// the node, or HOST:PORT) to target.
func startProxy(listen string, target netip.AddrPort, log *slog.Logger) (*portProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("port %s on the node: %w", strings.TrimPrefix(listen, ":"), err)
	}
	p := &portProxy{ln: ln, target: target, log: log, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *portProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.log.Warn("docker: port proxy accept", "port", p.ln.Addr(), "err", err)
			}
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.relay(c)
		}()
	}
}

// track registers c for close on stop; false when stopping already.
func (p *portProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		return true
	}
	if p.closed {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *portProxy) relay(in net.Conn) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", p.target.String(), 5*time.Second)
	if err != nil {
		p.log.Debug("docker: port proxy dial", "target", p.target, "err", err)
		return
	}
	defer out.Close()
	if !p.track(in, true) || !p.track(out, true) {
		return
	}
	defer p.track(in, false)
	defer p.track(out, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// stop closes the listener and every relayed connection.
func (p *portProxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
