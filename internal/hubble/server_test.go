package hubble

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	peerpb "github.com/cilium/cilium/api/v1/peer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/xlane-dev/xlane/internal/model"
)

// testServer serves a Server with a ring of n slots (no core: names are
// not resolved) on an in-memory connection.
func testServer(t *testing.T, n int) (*Server, observerpb.ObserverClient) {
	t.Helper()
	s := &Server{cfg: Config{NodeName: "n1", Version: "test"}, ring: newRing(n), ids: &identities{}}
	s.feed = &feed{ring: s.ring, interned: map[string]string{}}
	l := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	observerpb.RegisterObserverServer(g, s)
	go g.Serve(l)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, observerpb.NewObserverClient(conn)
}

// rec is a forwarded TCP flow to port (its sequence), at t0 + port ms.
func rec(port uint16) record {
	return record{time: t0.Add(time.Duration(port) * time.Millisecond).UnixNano(), kind: kindFlowNew, proto: 6,
		src: netip.MustParseAddr("10.0.0.1"), dst: netip.MustParseAddr("10.0.0.2"), sport: 40000, dport: port, action: "new"}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func recvAll(t *testing.T, c observerpb.Observer_GetFlowsClient) (ports []uint32, lost uint64) {
	t.Helper()
	for {
		r, err := c.Recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if f := r.GetFlow(); f != nil {
			ports = append(ports, tcpPort(f))
		}
		lost += r.GetLostEvents().GetNumEventsLost()
	}
}

func tcpPort(f *flowpb.Flow) uint32 { return f.GetL4().GetTCP().GetDestinationPort() }

func TestGetFlowsWindow(t *testing.T) {
	s, c := testServer(t, 8)
	for p := uint16(1); p <= 12; p++ { // 12 into 8 slots: 5..12 kept
		s.ring.add([]record{rec(p)})
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *observerpb.GetFlowsRequest
		want []uint32
	}{
		{"all", &observerpb.GetFlowsRequest{}, []uint32{5, 6, 7, 8, 9, 10, 11, 12}},
		{"last 3", &observerpb.GetFlowsRequest{Number: 3}, []uint32{10, 11, 12}},
		{"first 2", &observerpb.GetFlowsRequest{Number: 2, First: true}, []uint32{5, 6}},
		{"since until", &observerpb.GetFlowsRequest{Since: timestamppb.New(t0.Add(7 * time.Millisecond)),
			Until: timestamppb.New(t0.Add(9 * time.Millisecond))}, []uint32{7, 8, 9}},
		{"last 2 of a filter", &observerpb.GetFlowsRequest{Number: 2,
			Whitelist: []*flowpb.FlowFilter{{DestinationPort: []string{"6", "7", "11"}}}}, []uint32{7, 11}},
		{"blacklist", &observerpb.GetFlowsRequest{Number: 2,
			Blacklist: []*flowpb.FlowFilter{{DestinationPort: []string{"12"}}}}, []uint32{10, 11}},
	} {
		st, err := c.GetFlows(ctx, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := recvAll(t, st)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got ports %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: got ports %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// TestFollowers: 100 followers see every new flow; one that never reads
// holds nothing up (the ring's writer never waits for a reader) and, when
// it reads at last, is told how many flows the ring overwrote before it
// got to them.
func TestFollowers(t *testing.T) {
	const ring, followers, flows, more = 4096, 100, 500, 10000
	s, c := testServer(t, ring)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollowers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	counts := make([]int, followers)
	for i := range followers {
		st, err := c.GetFlows(fctx, &observerpb.GetFlowsRequest{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for counts[i] < flows {
				r, err := st.Recv()
				if err != nil {
					return
				}
				if r.GetLostEvents() != nil {
					t.Errorf("follower %d lost %d flows", i, r.GetLostEvents().GetNumEventsLost())
				}
				if r.GetFlow() != nil {
					counts[i]++
				}
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); s.followers.Load() < followers+1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d followers registered, want %d", s.followers.Load(), followers+1)
		}
	}
	add := func(from, n int) time.Duration {
		start := time.Now()
		for p := from; p < from+n; p++ {
			s.ring.add([]record{rec(uint16(p))})
		}
		return time.Since(start)
	}
	t.Logf("%d flows added in %v with %d followers", flows, add(1, flows), followers+1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("followers did not get every flow within 60 s")
	}
	for i, n := range counts {
		if n != flows {
			t.Errorf("follower %d got %d flows, want %d", i, n, flows)
		}
	}
	stopFollowers()
	for deadline := time.Now().Add(5 * time.Second); s.followers.Load() > 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d followers left after the others stopped, want 1", s.followers.Load())
		}
	}
	// The one that never read holds up nothing: the ring overtakes it.
	if d := add(flows+1, more); d > 5*time.Second {
		t.Errorf("%d flows took %v with a follower that does not read", more, d)
	}
	var got, lost uint64
	for got+lost < flows+more {
		r, err := slow.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetFlow() != nil {
			got++
		}
		lost += r.GetLostEvents().GetNumEventsLost()
	}
	if lost == 0 || got+lost != flows+more {
		t.Errorf("slow follower: %d flows and %d lost, want some lost and %d in all", got, lost, flows+more)
	}
	if s.skipped.Load() != int64(lost) {
		t.Errorf("skipped counter %d, want %d", s.skipped.Load(), lost)
	}
	t.Logf("slow follower: %d flows, %d lost", got, lost)
}

// TestPeers: with a TCP listener, Notify lists every node of the cluster
// at its underlay address and the listener's port, with the name Relay
// checks its certificate against; without one, this node at its socket.
func TestPeers(t *testing.T) {
	nodes := []model.Node{{Name: "n1", Self: true, Underlay: []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
		{Name: "n2", Underlay: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}, {Name: "n3"}}
	s := &Server{cfg: Config{NodeName: "n1", Listen: ":4244", TLSCert: "x"},
		deps: Deps{Nodes: func() ([]model.Node, error) { return nodes, nil }}}
	got := s.peers()
	want := map[string]string{"n1": "192.0.2.1:4244", "n2": "192.0.2.2:4244"}
	if len(got) != len(want) || got["n1"] != want["n1"] || got["n2"] != want["n2"] {
		t.Errorf("peers %v, want %v (n3 has no underlay address)", got, want)
	}
	if n := s.peer("n2", got["n2"], peerpb.ChangeNotificationType_PEER_ADDED); n.GetTls().GetServerName() != "n2.hubble-grpc.xlane.local" {
		t.Errorf("peer %v: want the TLS server name n2.hubble-grpc.xlane.local", n)
	}
	if n := s.peer("n2.example.com", got["n2"], peerpb.ChangeNotificationType_PEER_ADDED); n.GetTls().GetServerName() != "n2-example-com.hubble-grpc.xlane.local" {
		t.Errorf("peer %v: want the TLS server name n2-example-com.hubble-grpc.xlane.local (one label per node)", n)
	}
	// TLS files without a TCP listener (the DaemonSet names them either
	// way): the socket is plain, and its peer has no TLS name (Relay
	// refuses a plain peer with one).
	cfg := Config{NodeName: "n1", Socket: "/run/xlane/hubble.sock", TLSCert: "tls.crt", TLSKey: "tls.key", TLSClientCA: "ca.crt"}
	cfg.defaults()
	s = &Server{cfg: cfg, deps: s.deps}
	if got := s.peers(); len(got) != 1 || got["n1"] != "unix:///run/xlane/hubble.sock" {
		t.Errorf("peers without TCP %v, want n1 at the socket", got)
	}
	if n := s.peer("n1", "unix:///run/xlane/hubble.sock", peerpb.ChangeNotificationType_PEER_ADDED); n.GetTls() != nil {
		t.Errorf("peer at the socket %v: want no TLS", n)
	}
}
