package e2e

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xlane-dev/xlane/internal/api"
)

// hubbleShop is a node with xlaned --hubble (flags: more of them), network
// shop with endpoints client and web, web listening on 80 and 8081.
type hubbleShop struct {
	n               *node
	sock            string
	clientNS, webNS string
	clientIP, webIP netip.Addr
}

func newHubbleShop(t *testing.T, flags ...string) *hubbleShop {
	t.Helper()
	h := &hubbleShop{}
	h.n = newNode(t, func(n *node) {
		h.sock = filepath.Join(n.dir, "hubble.sock")
		n.flags = append(n.flags, append([]string{"--hubble", "--hubble-socket", h.sock}, flags...)...)
	})
	h.n.mustXlane(nil, "network", "create", "shop", "--subnet", "10.85.0.0/24", "--mode", "tc")
	h.webNS, h.clientNS = newNetns(t, "web"), newNetns(t, "cli")
	var web, client api.EndpointInfo
	h.n.mustXlane(&web, "endpoint", "add", "shop", "--netns", h.webNS, "--id", "web")
	h.n.mustXlane(&client, "endpoint", "add", "shop", "--netns", h.clientNS, "--id", "client")
	h.webIP, h.clientIP = web.IPs[0], client.IPs[0]
	listen(t, h.webNS, h.webIP, 80)
	listen(t, h.webNS, h.webIP, 8081)
	time.Sleep(3 * time.Second) // past a refresh of the names (every 2 s)
	return h
}

// dials connects client to web:port n times.
func (h *hubbleShop) dials(t *testing.T, port, n int) {
	t.Helper()
	for range n {
		if err := dial(h.clientNS, h.webIP, port, 2*time.Second); err != nil {
			t.Fatalf("client -> web:%d: %v", port, err)
		}
	}
}

// exportLines reads the JSON lines of the export's files, oldest first.
func exportLines(t *testing.T, files ...string) []*observerpb.GetFlowsResponse {
	t.Helper()
	var out []*observerpb.GetFlowsResponse
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for sc := bufio.NewScanner(fh); sc.Scan(); {
			var r observerpb.GetFlowsResponse
			if err := protojson.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: line %q: %v", f, sc.Text(), err)
			}
			out = append(out, &r)
		}
		fh.Close()
	}
	return out
}

// TestHubbleExport: xlaned --hubble-export-file-path writes real traffic's
// flows, named, as JSON lines the stock tools' -o json format has,
// rotating the file at its size with the backups asked for, the denylist's
// flows left out; `xlane monitor` names the same workloads.
func TestHubbleExport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.log")
	h := newHubbleShop(t, "--hubble-export-file-path", path, "--hubble-export-file-max-size", "8K",
		"--hubble-export-file-max-backups", "2", "--hubble-export-denylist", `{"destination_port":["8081"]}`)

	t.Run("monitor names", func(t *testing.T) {
		m := h.n.startMonitor(t, "-t", "flow_new", "--endpoint", "client")
		h.dials(t, 80, 1)
		ev := m.next(t, 10*time.Second, func(ev api.MonitorEvent) bool { return ev.DstPort == 80 })
		if ev.SrcName != "shop/client" || ev.DstName != "shop/web" {
			t.Errorf("monitor event %+v: want src_name shop/client, dst_name shop/web", ev)
		}
		m.stop()
	})

	t.Run("table", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(binDir, "xlane"), "--socket", h.n.socket, "monitor", "-t", "flow_new", "--endpoint", "client", "-c", "1")
		var out strings.Builder
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		for i := 0; ; i++ {
			h.dials(t, 80, 1)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("xlane monitor -c 1: %v", err)
				}
				if !strings.Contains(out.String(), "(shop/client) -> "+h.webIP.String()+":80 (shop/web)") {
					t.Errorf("xlane monitor printed:\n%s\nwant the addresses followed by (shop/client) and (shop/web)", out.String())
				}
				t.Logf("xlane monitor:\n%s", out.String())
				return
			case <-time.After(500 * time.Millisecond):
			}
			if i == 20 {
				cmd.Process.Kill()
				t.Fatal("xlane monitor -c 1: no event in 10 s")
			}
		}
	})

	// Real traffic past three files' worth (a flow line is ~600 bytes).
	h.dials(t, 8081, 10)
	h.dials(t, 80, 80)
	var st api.Status
	waitFor(t, 10*time.Second, "the export to write the flows", func() bool {
		h.n.mustXlane(&st, "status", "-o", "json")
		return st.Hubble != nil && st.Hubble.Export != nil && st.Hubble.Export.Lines >= 80
	})
	if e := st.Hubble.Export; e.Path != path || e.Errors != 0 || e.Lost != 0 {
		t.Errorf("xlane status export %+v: want %s, no errors, nothing lost", e, path)
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3: %v, want 2 backups only", path, err)
	}
	files := []string{path + ".2", path + ".1", path}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatalf("rotated files: %v", err)
		}
		if fi.Size() > 8<<10 {
			t.Errorf("%s: %d bytes, over the 8K rotation size", f, fi.Size())
		}
	}
	lines := exportLines(t, files...)
	seen := 0
	for _, r := range lines {
		f := r.GetFlow()
		if f == nil {
			t.Errorf("export line %v: want flows only (nothing lost)", r)
			continue
		}
		if tcpDport(f) == 8081 {
			t.Errorf("export line %v: port 8081 is on the denylist", r)
		}
		if tcpDport(f) == 80 && f.GetVerdict() == flowpb.Verdict_FORWARDED && names(f.GetSource()) == "shop/client" &&
			names(f.GetDestination()) == "shop/web" && r.GetNodeName() != "" {
			seen++
		}
	}
	if seen < 10 {
		t.Errorf("%d forwarded flows shop/client -> shop/web:80 in %d exported lines, want the last ones of 80", seen, len(lines))
	}
	b, _ := os.ReadFile(path)
	t.Logf("%d lines in 3 files; the current one starts:\n%.600s", len(lines), b)
	out, _, _ := h.n.xlane("status")
	t.Logf("xlane status:\n%s", out)
	if !strings.Contains(out, "hubble export:") {
		t.Errorf("xlane status: no hubble export line")
	}
}

// TestHubbleSlowClients: a client that opens a follow and never reads
// stalls neither the datapath nor 100 other followers; when it reads at
// last it is told how many flows it lost, and xlane status counts them.
func TestHubbleSlowClients(t *testing.T) {
	h := newHubbleShop(t, "--hubble-flows", "256")
	conn, err := grpc.NewClient("unix://"+h.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := observerpb.NewObserverClient(conn)
	// Its own connection: gRPC's flow control is per stream and per
	// connection, and this one never reads. Fixed windows of 64 KiB (no
	// growth by bandwidth estimation): the server's sends to it block
	// once 64 KiB of flows wait unread.
	slowConn, err := grpc.NewClient("unix://"+h.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer slowConn.Close()
	slowCtx, slowCancel := context.WithCancel(ctx)
	defer slowCancel()
	slow, err := observerpb.NewObserverClient(slowConn).GetFlows(slowCtx, &observerpb.GetFlowsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	const followers, conns = 100, 2000
	var marked atomic.Int32
	var wg sync.WaitGroup
	var lost atomic.Uint64
	for range followers {
		st, err := obs.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				lost.Add(r.GetLostEvents().GetNumEventsLost())
				if tcpDport(r.GetFlow()) == 8081 {
					marked.Add(1)
					return
				}
			}
		}()
	}
	waitFor(t, 10*time.Second, "the followers to be registered", func() bool {
		var st api.Status
		h.n.mustXlane(&st, "status", "-o", "json")
		return st.Hubble != nil && st.Hubble.Followers == followers+1
	})
	// Far more flows than the ring holds and the slow stream's gRPC
	// windows and the sockets' buffers take (~1,300 flows), paced under the monitor's rate (1,000 a second a
	// CPU) so that the ring gets them in many small batches; then a
	// marked one every follower must get.
	start := time.Now()
	for range conns {
		h.dials(t, 80, 1)
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	h.dials(t, 8081, 1)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%d of %d followers got the marked flow within 20 s", marked.Load(), followers)
	}
	if marked.Load() != followers {
		t.Errorf("%d of %d followers got the marked flow", marked.Load(), followers)
	}
	var st0 api.Status
	h.n.mustXlane(&st0, "status", "-o", "json")
	t.Logf("%d connections in %v with %d followers and one that does not read; the followers lost %d flows in all; the ring saw %d flows, the monitor's rate limit suppressed %d",
		conns, took.Round(time.Millisecond), followers, lost.Load(), st0.Hubble.Seen, st0.Hubble.Suppressed)
	// The datapath ran on: a transfer now.
	h.dials(t, 80, 1)
	// The slow one reads at last: flows, and how many it lost.
	var got, slowLost uint64
	time.AfterFunc(15*time.Second, slowCancel)
	for slowLost == 0 {
		r, err := slow.Recv()
		if err != nil {
			t.Fatalf("the client that did not read got %d flows and no lost event within 15 s: %v", got, err)
		}
		if r.GetFlow() != nil {
			got++
		}
		slowLost += r.GetLostEvents().GetNumEventsLost()
	}
	t.Logf("the client that did not read: %d flows, then told %d were lost", got, slowLost)
	var st api.Status
	h.n.mustXlane(&st, "status", "-o", "json")
	if got == 0 {
		t.Errorf("the client that did not read got no flow before the lost event: want what its window took first")
	}
	if st.Hubble.Skipped < slowLost {
		t.Errorf("xlane status hubble skipped %d, want at least the %d the slow client lost", st.Hubble.Skipped, slowLost)
	}
}
