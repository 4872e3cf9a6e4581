package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xlane-dev/xlane/internal/api"
)

// hubbleCLI is the stock hubble CLI built from the module go.mod requires
// (scripts/hubble-bins.sh, cached outside the tree; make test passes its
// directory in XLANE_HUBBLE_BIN).
func hubbleCLI(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("XLANE_HUBBLE_BIN")
	if dir == "" {
		out, err := exec.Command("../../scripts/hubble-bins.sh", "hubble", "hubble-relay").Output()
		if err != nil {
			t.Fatalf("scripts/hubble-bins.sh: %v", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "hubble")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the hubble CLI: %v", err)
	}
	return bin
}

// hubbleRun runs `hubble ARGS --server unix://SOCK` and returns stdout.
func hubbleRun(t *testing.T, bin, sock string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--server", "unix://"+sock)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hubble %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// hubbleFlows parses `hubble observe -o json` (a GetFlowsResponse a line).
func hubbleFlows(t *testing.T, out string) []*flowpb.Flow {
	t.Helper()
	var flows []*flowpb.Flow
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r observerpb.GetFlowsResponse
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("hubble json line %q: %v", l, err)
		}
		if f := r.GetFlow(); f != nil {
			flows = append(flows, f)
		}
	}
	return flows
}

func tcpDport(f *flowpb.Flow) uint32 { return f.GetL4().GetTCP().GetDestinationPort() }

func names(e *flowpb.Endpoint) string { return e.GetNamespace() + "/" + e.GetPodName() }

// observeUntil runs `hubble observe ARGS -o json` until a flow satisfies
// ok (the feed polls the monitor's ring: a flow shows within a poll or
// two), and returns every flow of that run.
func observeUntil(t *testing.T, bin, sock string, ok func(*flowpb.Flow) bool, args ...string) ([]*flowpb.Flow, *flowpb.Flow) {
	t.Helper()
	var flows []*flowpb.Flow
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		flows = hubbleFlows(t, hubbleRun(t, bin, sock, append([]string{"observe", "-o", "json"}, args...)...))
		for _, f := range flows {
			if ok(f) {
				return flows, f
			}
		}
	}
	for _, f := range flows {
		t.Logf("flow: %v", f)
	}
	t.Fatalf("hubble observe %s: no matching flow among %d within 10 s", strings.Join(args, " "), len(flows))
	return nil, nil
}

//	client, web --- node [xlaned --hubble --hubble-socket DIR/hubble.sock]
//	   (network shop, tc mode; rule closed drops tcp/8081 to web;
//	    service websvc 10.96.84.1:80 -> web:80)
//
// The stock hubble CLI against a real xlaned and real traffic: an allowed
// TCP flow, a policy drop with its reason and rule, a service translation,
// each named namespace/pod (xlane's network/endpoint), through the
// filters the CLI sends (--pod, --namespace, --verdict, --to-service,
// --since, --follow), hubble status and hubble list nodes; names stay
// after the endpoint is removed; a malformed filter is refused naming it.
func TestHubble(t *testing.T) {
	bin := hubbleCLI(t)
	var sock string
	n := newNode(t, func(n *node) {
		sock = filepath.Join(n.dir, "hubble.sock")
		n.flags = append(n.flags, "--hubble", "--hubble-socket", sock, "--hubble-flows", "1024")
	})
	n.mustXlane(nil, "network", "create", "shop", "--subnet", "10.84.0.0/24", "--mode", "tc")
	webNS, clientNS := newNetns(t, "web"), newNetns(t, "cli")
	var web, client api.EndpointInfo
	n.mustXlane(&web, "endpoint", "add", "shop", "--netns", webNS, "--id", "web")
	n.mustXlane(&client, "endpoint", "add", "shop", "--netns", clientNS, "--id", "client")
	webIP, clientIP := web.IPs[0], client.IPs[0]
	listen(t, webNS, webIP, 80)
	listen(t, webNS, webIP, 8081)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - {name: closed, scope: network:shop, direction: to-endpoint, proto: tcp, dport: 8081, action: drop}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.mustXlane(nil, "fw", "apply", rules)
	vip := netip.MustParseAddr("10.96.84.1")
	n.mustXlane(nil, "service", "create", "websvc", "--vip", netip.AddrPortFrom(vip, 80).String()+"/tcp",
		"--backend", netip.AddrPortFrom(webIP, 80).String())

	if err := dial(clientNS, webIP, 80, 2*time.Second); err != nil {
		t.Fatalf("client -> web:80: %v", err)
	}
	if err := dial(clientNS, webIP, 8081, 500*time.Millisecond); err == nil {
		t.Fatal("client -> web:8081 (dropped by rule closed) answered")
	}
	if err := dial(clientNS, vip, 80, 2*time.Second); err != nil {
		t.Fatalf("client -> websvc %s:80: %v", vip, err)
	}

	t.Run("forwarded, by pod", func(t *testing.T) {
		flows, f := observeUntil(t, bin, sock, func(f *flowpb.Flow) bool {
			return f.GetVerdict() == flowpb.Verdict_FORWARDED && tcpDport(f) == 80 && f.GetIP().GetDestination() == webIP.String()
		}, "--pod", "shop/client", "--last", "100")
		if names(f.GetSource()) != "shop/client" || names(f.GetDestination()) != "shop/web" ||
			f.GetIP().GetSource() != clientIP.String() || !f.GetL4().GetTCP().GetFlags().GetSYN() ||
			f.GetIsReply() == nil || f.GetIsReply().GetValue() || f.GetNodeName() == "" ||
			!strings.Contains(strings.Join(f.GetSource().GetLabels(), ","), "xlane:endpoint=client") {
			t.Errorf("forwarded flow %v: want shop/client -> shop/web:80, SYN, not a reply, on a node, labelled", f)
		}
		for _, f := range flows {
			if names(f.GetSource()) != "shop/client" && names(f.GetDestination()) != "shop/client" {
				t.Errorf("--pod shop/client showed %v", f)
			}
		}
	})

	t.Run("dropped with its reason", func(t *testing.T) {
		_, f := observeUntil(t, bin, sock, func(f *flowpb.Flow) bool { return tcpDport(f) == 8081 && f.GetEventType().GetType() == 1 },
			"--verdict", "DROPPED", "--namespace", "shop", "--since", "1m")
		if f.GetVerdict() != flowpb.Verdict_DROPPED || f.GetDropReasonDesc() != flowpb.DropReason_POLICY_DENIED ||
			names(f.GetSource()) != "shop/client" || names(f.GetDestination()) != "shop/web" ||
			len(f.GetEgressDeniedBy()) != 1 || f.GetEgressDeniedBy()[0].GetName() != "closed" ||
			f.GetEventType().GetType() != 1 {
			t.Errorf("dropped flow %v: want POLICY_DENIED by rule closed, shop/client -> shop/web:8081, a drop event", f)
		}
		// The CLI's own line for it.
		out := hubbleRun(t, bin, sock, "observe", "--verdict", "DROPPED", "--to-port", "8081")
		if !strings.Contains(out, "shop/client:") || !strings.Contains(out, "shop/web:8081") ||
			!strings.Contains(out, "Policy denied DROPPED") {
			t.Errorf("hubble observe --verdict DROPPED printed:\n%s\nwant shop/client -> shop/web:8081 Policy denied DROPPED", out)
		}
		t.Logf("hubble observe --verdict DROPPED:\n%s", out)
	})

	t.Run("service translation", func(t *testing.T) {
		_, f := observeUntil(t, bin, sock, func(f *flowpb.Flow) bool { return f.GetVerdict() == flowpb.Verdict_TRANSLATED },
			"--to-service", "websvc")
		if f.GetDestinationService().GetName() != "websvc" || f.GetDestinationService().GetNamespace() != "shop" || names(f.GetDestination()) != "shop/web" ||
			f.GetIP().GetDestination() != webIP.String() || tcpDport(f) != 80 || names(f.GetSource()) != "shop/client" {
			t.Errorf("translated flow %v: want shop/client -> websvc, backend shop/web %s:80", f, webIP)
		}
	})

	t.Run("follow", func(t *testing.T) {
		cmd := exec.Command(bin, "observe", "--follow", "--pod", "shop/client", "--to-port", "80", "-o", "json", "--server", "unix://"+sock)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
		lines := make(chan string, 100)
		go func() {
			defer close(lines)
			for sc := bufio.NewScanner(out); sc.Scan(); {
				lines <- sc.Text()
			}
		}()
		time.Sleep(500 * time.Millisecond) // the stream is open
		if err := dial(clientNS, webIP, 80, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("hubble observe --follow ended")
				}
				for _, f := range hubbleFlows(t, l) {
					if f.GetVerdict() == flowpb.Verdict_FORWARDED && names(f.GetSource()) == "shop/client" {
						return
					}
				}
			case <-deadline:
				t.Fatal("hubble observe --follow: no new flow of shop/client within 10 s")
			}
		}
	})

	t.Run("status and nodes", func(t *testing.T) {
		out := hubbleRun(t, bin, sock, "status")
		if !strings.Contains(out, "Healthcheck (via unix://"+sock+"): Ok") || !strings.Contains(out, "/1,024") {
			t.Errorf("hubble status:\n%s\nwant Ok and a ring of 1,024 flows", out)
		}
		t.Logf("hubble status:\n%s", out)
		host, _ := os.Hostname()
		out = hubbleRun(t, bin, sock, "list", "nodes")
		if !strings.Contains(out, host) || !strings.Contains(out, "Connected") {
			t.Errorf("hubble list nodes:\n%s\nwant %s, connected", out, host)
		}
		var st api.Status
		n.mustXlane(&st, "status", "-o", "json")
		if h := st.Hubble; h == nil || h.MaxFlows != 1024 || h.Flows == 0 || h.RingBytes < 1024*64 || h.Identities != 2 {
			t.Errorf("xlane status hubble part %+v: want 1024 slots, some flows, their memory, 2 endpoints named", h)
		}
	})

	t.Run("relay", func(t *testing.T) {
		// Hubble Relay, unmodified, finds this xlaned through its Peer
		// service (the unix socket) and serves its flows on TCP.
		runIn(t, n.netns, "ip", "link", "set", "lo", "up")
		relay := inNS(n.netns, filepath.Join(filepath.Dir(bin), "hubble-relay"), "serve", "--peer-service", "unix://"+sock,
			"--listen-address", "127.0.0.1:4245", "--health-listen-address", "127.0.0.1:4222", "--gops=false",
			"--disable-server-tls", "--disable-client-tls")
		var rlog strings.Builder
		relay.Stdout, relay.Stderr = &rlog, &rlog
		if err := relay.Start(); err != nil {
			t.Fatalf("hubble-relay: %v", err)
		}
		defer func() {
			relay.Process.Signal(syscall.SIGTERM)
			relay.Wait()
			if t.Failed() {
				t.Logf("hubble-relay log:\n%s", rlog.String())
			}
		}()
		host, _ := os.Hostname()
		var out string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			b, _ := inNS(n.netns, bin, "list", "nodes", "--server", "127.0.0.1:4245").CombinedOutput()
			if out = string(b); strings.Contains(out, host) && strings.Contains(out, "Connected") {
				break
			}
		}
		if !strings.Contains(out, host) || !strings.Contains(out, "Connected") {
			t.Fatalf("hubble list nodes through Relay:\n%s\nwant %s connected", out, host)
		}
		t.Logf("hubble list nodes (Relay):\n%s", out)
		b, err := inNS(n.netns, bin, "observe", "--server", "127.0.0.1:4245", "--pod", "shop/client", "--verdict", "DROPPED", "-o", "json").Output()
		if err != nil {
			t.Fatalf("hubble observe through Relay: %v", err)
		}
		flows := hubbleFlows(t, string(b))
		if len(flows) == 0 || flows[0].GetNodeName() != host || names(flows[0].GetSource()) != "shop/client" {
			t.Errorf("drops through Relay %v: want shop/client's, from node %s", flows, host)
		}
	})

	t.Run("tcp with mutual tls", func(t *testing.T) {
		dir := t.TempDir()
		host, _ := os.Hostname()
		ca := writeTLS(t, dir, hubbleServerName(host))
		runIn(t, n.netns, "ip", "link", "set", "lo", "up")
		n.stop(syscall.SIGTERM)
		n.flags = append(n.flags, "--hubble-listen-address", "127.0.0.1:4244",
			"--hubble-tls-cert", filepath.Join(dir, "server.pem"), "--hubble-tls-key", filepath.Join(dir, "server-key.pem"),
			"--hubble-tls-client-ca", ca)
		n.start()
		if err := dial(clientNS, webIP, 8081, 500*time.Millisecond); err == nil {
			t.Fatal("client -> web:8081 (dropped by rule closed) answered")
		}
		tls := []string{"--server", "127.0.0.1:4244", "--tls", "--tls-server-name", hubbleServerName(host),
			"--tls-ca-cert-files", ca}
		mtls := append(tls, "--tls-client-cert-file", filepath.Join(dir, "client.pem"), "--tls-client-key-file", filepath.Join(dir, "client-key.pem"))
		var out []byte
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			out, err = inNS(n.netns, append([]string{bin, "observe", "--verdict", "DROPPED", "-o", "json"}, mtls...)...).Output()
			if err == nil && len(hubbleFlows(t, string(out))) > 0 {
				break
			}
		}
		if flows := hubbleFlows(t, string(out)); err != nil || len(flows) == 0 || tcpDport(flows[0]) != 8081 {
			t.Fatalf("hubble observe over mutual TLS: %v, flows %v: want the drop to 8081", err, flows)
		}
		// Without a client certificate the server refuses.
		if out, err := inNS(n.netns, append([]string{bin, "observe", "--last", "1"}, tls...)...).CombinedOutput(); err == nil {
			t.Errorf("hubble observe over TLS without a client certificate succeeded:\n%s", out)
		}
		if out, err := inNS(n.netns, bin, "observe", "--last", "1", "--server", "127.0.0.1:4244").CombinedOutput(); err == nil {
			t.Errorf("hubble observe in plaintext against the TLS port succeeded:\n%s", out)
		}
	})

	t.Run("names kept after removal", func(t *testing.T) {
		n.mustXlane(nil, "endpoint", "rm", "client")
		time.Sleep(3 * time.Second) // past a refresh of the names
		flows := hubbleFlows(t, hubbleRun(t, bin, sock, "observe", "-o", "json", "--from-ip", clientIP.String(), "--last", "5"))
		if len(flows) == 0 {
			t.Fatal("no flows from the removed client's address")
		}
		for _, f := range flows {
			if names(f.GetSource()) != "shop/client" {
				t.Errorf("flow of the removed client %v: want it still named shop/client", f)
			}
		}
	})

	t.Run("malformed filter", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, req := range []*observerpb.GetFlowsRequest{
			{Whitelist: []*flowpb.FlowFilter{{SourceIp: []string{"10.0.0.300"}}}},
			{Blacklist: []*flowpb.FlowFilter{{}, {DestinationPort: []string{"http"}}}},
			{Whitelist: []*flowpb.FlowFilter{{DnsQuery: []string{"example.com"}}}},
			{First: true, Follow: true},
		} {
			s, err := observerpb.NewObserverClient(conn).GetFlows(ctx, req)
			if err == nil {
				_, err = s.Recv()
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("GetFlows(%v): %v, want InvalidArgument", req, err)
			}
			t.Logf("GetFlows(%v): %v", req, err)
		}
	})
}

// hubbleServerName is the name Relay expects a node's certificate to
// carry (internal/hubble TLSServerName).
func hubbleServerName(node string) string {
	return strings.ReplaceAll(node, ".", "-") + ".hubble-grpc.xlane.local"
}

// writeTLS writes a CA (returned: its file), a server certificate for
// names and 127.0.0.1 (server.pem, server-key.pem), and a client
// certificate (client.pem, client-key.pem), into dir.
func writeTLS(t *testing.T, dir string, names ...string) string {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xlane test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	for i, c := range []struct {
		name  string
		usage x509.ExtKeyUsage
	}{{"server", x509.ExtKeyUsageServerAuth}, {"client", x509.ExtKeyUsageClientAuth}} {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: c.name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{c.usage}}
		if c.name == "server" {
			tmpl.DNSNames = names
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(c.name+".pem", "CERTIFICATE", der)
		write(c.name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	return filepath.Join(dir, "ca.pem")
}
