package main

// The real traffic: servers in the real pods (a byte naming the pod per
// connection) and a checker in the client pod connecting to each target
// once every connEvery, counting failures. Sockets are made inside the
// pods' network namespaces (ns.WithNetNSPath on a locked thread: a socket
// stays in the namespace it was made in), so no process is started.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

const (
	connEvery   = 50 * time.Millisecond
	connTimeout = 2 * time.Second
	serverPort  = 8080
)

// serve listens on addr:serverPort in netns and answers every connection
// with id; it stops with ctx.
func serve(ctx context.Context, netns string, addr netip.Addr, id byte) error {
	var ln net.Listener
	err := ns.WithNetNSPath(filepath.Join(harness.NetnsDir, netns), func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, serverPort).String())
		return err
	})
	if err != nil {
		return fmt.Errorf("listen in %s: %w", netns, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetWriteDeadline(time.Now().Add(connTimeout))
			c.Write([]byte{id})
			c.Close()
		}
	}()
	return nil
}

// connStats is what the checker counted for one target.
type connStats struct {
	OK, Failed int
	// Errors: the first failures (time and error).
	Errors []string `json:",omitempty"`
}

// checker connects from a pod to targets, each once every connEvery.
type checker struct {
	mu     sync.Mutex
	stats  map[string]*connStats // target name -> since the last take
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// target is an address the checker connects to and the bytes its
// servers answer with.
type target struct {
	addr netip.AddrPort
	want []byte
}

// startChecker starts connecting from netns to each target (by name).
func startChecker(netns string, targets map[string]target) *checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &checker{stats: map[string]*connStats{}, cancel: cancel}
	path := filepath.Join(harness.NetnsDir, netns)
	for name, tg := range targets {
		c.stats[name] = &connStats{}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			t := time.NewTicker(connEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				err := connectOnce(path, tg.addr, tg.want)
				if ctx.Err() != nil {
					return
				}
				c.mu.Lock()
				s := c.stats[name]
				if err == nil {
					s.OK++
				} else {
					s.Failed++
					if len(s.Errors) < 5 {
						s.Errors = append(s.Errors, time.Now().UTC().Format("15:04:05.000")+" "+err.Error())
					}
				}
				c.mu.Unlock()
			}
		}()
	}
	return c
}

func connectOnce(path string, addr netip.AddrPort, want []byte) error {
	var conn net.Conn
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		conn, err = net.DialTimeout("tcp", addr.String(), connTimeout)
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(connTimeout))
	b := make([]byte, 1)
	if _, err := io.ReadFull(conn, b); err != nil {
		return fmt.Errorf("read from %s: %w", addr, err)
	}
	for _, w := range want {
		if b[0] == w {
			return nil
		}
	}
	return fmt.Errorf("%s answered %q, want one of %q", addr, b, want)
}

// take returns the counts since the last take.
func (c *checker) take() map[string]connStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]connStats{}
	for name, s := range c.stats {
		out[name] = *s
		*s = connStats{}
	}
	return out
}

func (c *checker) stop() {
	c.cancel()
	c.wg.Wait()
}

// failed sums the failures of a take.
func failed(m map[string]connStats) int {
	n := 0
	for _, s := range m {
		n += s.Failed
	}
	return n
}
