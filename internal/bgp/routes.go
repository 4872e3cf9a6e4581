package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routeProtocol marks the kernel routes the speaker installs (RTPROT_BGP,
// "proto bgp" in ip route).
const routeProtocol = netlink.RouteProtocol(unix.RTPROT_BGP)

// installLoop keeps the kernel's routes in step with the best paths the
// peers send (Config.InstallRoutes): after every best-path change, and
// every 30 s. It stops with the speaker; the routes stay (the datapath
// and the peers' graceful restart outlive xlaned; a restarted speaker
// takes them over).
func (s *Speaker) installLoop() {
	defer s.wg.Done()
	kick := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := s.srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{
		OnBestPath: func([]*apiutil.Path, time.Time) {
			select {
			case kick <- struct{}{}:
			default:
			}
		},
	}, server.WatchBestPath(false))
	if err != nil {
		s.log.Error("bgp: watch learned routes", "err", err)
	}
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-kick:
			time.Sleep(20 * time.Millisecond) // one pass for a burst
		case <-t.C:
		}
		if err := s.installRoutes(); err != nil {
			s.log.Warn("bgp: install learned routes", "err", err)
		}
	}
}

// installRoutes installs each learned best path's prefix via its next hop
// (proto bgp) and removes the speaker's routes no longer learned. It
// leaves alone a default route (the node's own), a prefix this node
// announces, and a prefix some other route of the node already has (a
// connected segment, xlane's own peer and endpoint routes).
func (s *Speaker) installRoutes() error {
	want := map[netip.Prefix]netip.Addr{}
	s.mu.Lock()
	own := make(map[netip.Prefix]bool, len(s.announced))
	for p := range s.announced {
		own[p] = true
	}
	s.mu.Unlock()
	for _, r := range s.learned() {
		if r.Prefix.Bits() == 0 || own[r.Prefix] || !r.NextHop.IsValid() || r.NextHop.IsUnspecified() {
			continue
		}
		want[r.Prefix] = r.NextHop
	}
	have := map[netip.Prefix]netlink.Route{}
	others := map[netip.Prefix]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			p, ok := prefixOf(r.Dst)
			if !ok {
				continue
			}
			if r.Protocol == routeProtocol {
				have[p] = r
			} else {
				others[p] = true
			}
		}
	}
	var errs []error
	for p, nh := range want {
		if others[p] {
			continue
		}
		if r, ok := have[p]; ok && r.Gw != nil && r.Gw.Equal(nh.AsSlice()) {
			continue
		}
		r := &netlink.Route{Dst: ipnetOf(p), Gw: nh.AsSlice(), Protocol: routeProtocol}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", p, nh, err))
		}
	}
	for p, r := range have {
		if _, ok := want[p]; !ok || others[p] {
			if err := netlink.RouteDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("delete route %s: %w", p, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d routes: %w", len(errs), len(want), errs[0])
	}
	return nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

func ipnetOf(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
