package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/test/k8senv"
)

// relayManifestArgs are the arguments of Relay's container in
// deploy/kubernetes/hubble/relay.yaml, with the in-cluster values
// replaced: repl maps a flag to its value here (the Secret's files to
// the test's).
func relayManifestArgs(t *testing.T, repl map[string]string) []string {
	t.Helper()
	objs, err := k8senv.Decode("../../deploy/kubernetes/hubble/relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		var out []string
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			k, _, _ := strings.Cut(a, "=")
			if v, ok := repl[k]; ok {
				a = k + "=" + v
			}
			out = append(out, a)
		}
		return out
	}
	t.Fatal("relay.yaml: no Deployment")
	return nil
}

//	  web-n1 (pod)           web-n2 (pod)
//	    |                      |
//	n1: xlaned --hubble      n2: xlaned --hubble       192.168.78.I:4244, mutual TLS
//	    | ul0                    | ul0
//	    +--------- br0 ----------+
//	                |
//	cp: control plane, hubble-relay --peer-service 192.168.78.1:4244 (192.168.78.100)
//
// TestKubernetesHubble: Hubble Relay, unmodified and with the arguments
// of deploy/kubernetes/hubble/relay.yaml, over the two-node cluster of
// TestKubernetesCluster: told n1's xlaned only, it finds both through
// the Peer service and reads each over mutual TLS, and the stock hubble
// CLI through it sees real traffic of both nodes with pod names: pod to
// pod across nodes (--pod), the namespace (--namespace), a ClusterIP's
// translation to the pods of both nodes (--to-service), a NetworkPolicy's
// drop on n2 (--verdict DROPPED).
func TestKubernetesHubble(t *testing.T) {
	bins := k8sBins(t, "kube-apiserver", "xlane-etcd", "kubelet", "kube-controller-manager")
	hubble := hubbleCLI(t)
	relayBin := filepath.Join(filepath.Dir(hubble), "hubble-relay")
	// The certificates as docs/hubble.md makes them: one server
	// certificate for every node (the Secret hubble-server-certs), one
	// for Relay (hubble-relay-client-certs), one CA.
	tlsDir := t.TempDir()
	run(t, "../../scripts/hubble-certs.sh", tlsDir)
	tls := func(f string) string { return filepath.Join(tlsDir, f) }
	flags := []string{"--hubble", "--hubble-socket=", "--hubble-listen-address=0.0.0.0:4244",
		"--hubble-tls-cert=" + tls("server.crt"), "--hubble-tls-key=" + tls("server.key"), "--hubble-tls-client-ca=" + tls("ca.crt")}
	began := time.Now()
	kc := startKubeCluster(t, bins, clusterCIDR, false)
	cp := kc.cp
	image := "docker.io/xlane-e2e/podserver:" + suffix()
	var nodes []*kubeletNode
	for i := 1; i <= 2; i++ {
		nodes = append(nodes, startKubeletNode(t, bins, cp, kc.ul, i, image, kubeletOpts{xlanedFlags: flags}))
	}
	ctx := context.Background()
	kc.waitNodes(t, nodes, began)
	pods := startWebPods(t, cp, nodes, image, began)
	_, vips := createWebService(t, cp, nodes)

	// Relay in the control plane's namespace, reaching the nodes on the
	// underlay.
	runIn(t, kc.cpNS, "ip", "link", "set", "lo", "up")
	args := relayManifestArgs(t, map[string]string{
		"--peer-service":                nodes[0].addr4.String() + ":4244",
		"--listen-address":              "127.0.0.1:4245",
		"--health-listen-address":       "127.0.0.1:4222",
		"--tls-hubble-client-cert-file": tls("relay.crt"),
		"--tls-hubble-client-key-file":  tls("relay.key"),
		"--tls-hubble-server-ca-files":  tls("ca.crt"),
	})
	relay := startProc(t, "hubble-relay", kc.cpNS, append([]string{relayBin}, args...)...)
	hubbleAt := func(args ...string) (string, error) {
		b, err := inNS(kc.cpNS, append([]string{hubble}, append(args, "--server", "127.0.0.1:4245")...)...).CombinedOutput()
		return string(b), err
	}
	var out string
	waitFor(t, 60*time.Second, "hubble list nodes through Relay: n1 and n2 connected", func() bool {
		var err error
		out, err = hubbleAt("list", "nodes")
		return err == nil && strings.Count(out, "Connected") == 2 && strings.Contains(out, "n1") && strings.Contains(out, "n2")
	})
	t.Logf("hubble list nodes (Relay):\n%s", out)

	// Real traffic: n1's pod to n2's pod, through the ClusterIP to the
	// pods of both nodes, then a NetworkPolicy isolating n2's pod (open
	// to n1's on 8080 only) drops n1's pod's connection to 9090.
	for range 3 {
		if err := dial(pods[0].sbx.netns, pods[1].ip4, 8080, 3*time.Second); err != nil {
			t.Fatalf("web-n1 -> web-n2:8080: %v", err)
		}
	}
	reachesBoth(t, pods[0].sbx.netns, vips[0])
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "n2-in"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"node": "n2"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"node": "n1"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromInt(8080))}},
			}},
		},
	}
	if _, err := cp.cs.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create networkpolicy: %v", err)
	}
	waitFor(t, 30*time.Second, "web-n1 kept from web-n2:9090 (n2-in)", func() bool {
		return dial(pods[0].sbx.netns, pods[1].ip4, 9090, time.Second) != nil
	})

	observe := func(ok func(*flowpb.Flow) bool, args ...string) ([]*flowpb.Flow, *flowpb.Flow) {
		t.Helper()
		var flows []*flowpb.Flow
		var out string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			var err error
			out, err = hubbleAt(append([]string{"observe", "-o", "json", "--last", "2000"}, args...)...)
			if err != nil {
				continue
			}
			flows = hubbleFlows(t, out)
			for _, f := range flows {
				if ok(f) {
					return flows, f
				}
			}
		}
		for _, f := range flows {
			t.Logf("flow: %v", f)
		}
		t.Fatalf("hubble observe %s through Relay: no matching flow among %d within 20 s\n%.2000s", strings.Join(args, " "), len(flows), out)
		return nil, nil
	}
	onNode := func(flows []*flowpb.Flow, node string, ok func(*flowpb.Flow) bool) bool {
		for _, f := range flows {
			if f.GetNodeName() == node && ok(f) {
				return true
			}
		}
		return false
	}
	podToPod := func(f *flowpb.Flow) bool {
		return names(f.GetSource()) == "default/web-n1" && names(f.GetDestination()) == "default/web-n2" && tcpDport(f) == 8080 &&
			f.GetVerdict() == flowpb.Verdict_FORWARDED
	}

	t.Run("pod", func(t *testing.T) {
		// web-n1's flows from both nodes: its connections to web-n2 on
		// n1, and on n2 (which names n1's pod from the cluster's pods)
		// at least the policy's drop.
		of := func(f *flowpb.Flow) bool {
			return names(f.GetSource()) == "default/web-n1" || names(f.GetDestination()) == "default/web-n1"
		}
		flows, _ := observe(func(f *flowpb.Flow) bool { return f.GetNodeName() == "n2" && of(f) }, "--pod", "default/web-n1")
		if !onNode(flows, "n1", podToPod) {
			t.Errorf("--pod default/web-n1: no flow web-n1 -> web-n2:8080 from node n1")
		}
		t.Logf("--pod default/web-n1: web-n1 -> web-n2:8080 forwarded seen on n2 too: %v", onNode(flows, "n2", podToPod))
		for _, f := range flows {
			if !of(f) {
				t.Errorf("--pod default/web-n1 showed %v", f)
			}
		}
	})

	t.Run("namespace", func(t *testing.T) {
		flows, _ := observe(func(f *flowpb.Flow) bool { return f.GetNodeName() == "n2" }, "--namespace", "default")
		if !onNode(flows, "n1", func(*flowpb.Flow) bool { return true }) {
			t.Errorf("--namespace default: no flow from node n1")
		}
		for _, f := range flows {
			if f.GetSource().GetNamespace() != "default" && f.GetDestination().GetNamespace() != "default" {
				t.Errorf("--namespace default showed %v", f)
			}
		}
	})

	t.Run("to-service", func(t *testing.T) {
		backend := func(pod string) func(*flowpb.Flow) bool {
			return func(f *flowpb.Flow) bool {
				return f.GetVerdict() == flowpb.Verdict_TRANSLATED && names(f.GetDestination()) == pod &&
					f.GetDestinationService().GetNamespace() == "default" && f.GetDestinationService().GetName() == "web" &&
					names(f.GetSource()) == "default/web-n1"
			}
		}
		flows, _ := observe(backend("default/web-n2"), "--to-service", "default/web")
		if !onNode(flows, "n1", backend("default/web-n1")) {
			t.Errorf("--to-service default/web: no translation to web-n1 (the other backend) on n1")
		}
		for _, f := range flows {
			if f.GetDestinationService().GetName() != "web" {
				t.Errorf("--to-service default/web showed %v", f)
			}
		}
	})

	t.Run("status", func(t *testing.T) {
		// Relay is healthy while it reads the Peer service and a node.
		var out string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if out, _ = hubbleAt("status"); strings.Contains(out, "Ok") && strings.Contains(out, "Connected Nodes: 2/2") {
				break
			}
		}
		if !strings.Contains(out, "Ok") || !strings.Contains(out, "Connected Nodes: 2/2") {
			t.Errorf("hubble status through Relay:\n%s\nwant Ok, 2/2 nodes; Relay's log:\n%s", out, relay)
		}
		t.Logf("$ hubble status --server RELAY\n%s", out)
	})

	t.Run("dropped", func(t *testing.T) {
		_, f := observe(func(f *flowpb.Flow) bool { return tcpDport(f) == 9090 && f.GetEventType().GetType() == 1 }, "--verdict", "DROPPED")
		if f.GetNodeName() != "n2" || names(f.GetSource()) != "default/web-n1" || names(f.GetDestination()) != "default/web-n2" ||
			f.GetDropReasonDesc() != flowpb.DropReason_POLICY_DENIED {
			t.Errorf("drop %v: want web-n1 -> web-n2:9090 on n2, POLICY_DENIED", f)
		}
		// The operator's session of docs/observability.md.
		for _, args := range [][]string{
			{"observe", "--print-node-name", "--verdict", "DROPPED", "--namespace", "default", "--last", "4"},
			{"observe", "--print-node-name", "--pod", "default/web-n1", "--to-port", "8080", "--verdict", "FORWARDED", "--last", "4"},
			{"observe", "--print-node-name", "--to-service", "default/web", "--last", "4"},
			{"observe", "--print-node-name", "--from-pod", "default/web-n1", "--to-pod", "default/web-n2", "--since", "5m", "--last", "6"},
		} {
			out, _ := hubbleAt(args...)
			t.Logf("$ hubble %s --server RELAY\n%s", strings.Join(args, " "), out)
		}
	})
	t.Logf("the test took %v", time.Since(began).Round(time.Millisecond))
}
