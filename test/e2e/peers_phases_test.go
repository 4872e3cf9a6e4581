package e2e

// bench/peers' rows after the repetitions of the per-path rows: a
// NetworkPolicy of 1,000 rules on the connection rate, then 10,000
// Services (how long until they answer after the last API write, the
// connection rate and the agents' memory among them). Each changes the
// cluster for what follows, so each runs once per setup, its rates
// measured in rotation like the other rows.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/xlane-dev/xlane/bench/peers"
	"github.com/xlane-dev/xlane/test/tools/connrate"
)

// peersScaleServices is the Services of the scale rows.
const peersScaleServices = 10000

// createNodePortService makes Service name of type NodePort for the pods
// of label app on target and returns where node reaches it (addr: a
// node's underlay address).
func createNodePortService(t *testing.T, cp *controlPlane, name, app string, target int32, addr netip.Addr) netip.AddrPort {
	t.Helper()
	svc, err := cp.cs.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "conn", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(target)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return netip.AddrPortFrom(addr, uint16(svc.Spec.Ports[0].NodePort))
}

// peersPolicy is a NetworkPolicy of rules ingress rules on the remote
// pod: rules-1 that match nothing of the benchmark (each an outside /32
// on a port of its own), then the client pod on the connection server's
// port. A pod selector, not an ipBlock, names the client: Cilium's
// ipBlock peers do not select pods.
func peersPolicy(rules int) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "peers-1000"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "remote"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	for i := range rules - 1 {
		port := intstr.FromInt32(int32(30000 + i))
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
			From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("198.18.%d.%d/32", i/250, i%250+1)}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}})
	}
	port := intstr.FromInt32(peersConnPort)
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}}})
	return np
}

// reaches says whether pod p connects to dst within two seconds.
func (p *benchPod) reaches(dst netip.AddrPort) bool {
	return p.command("timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", dst.Addr(), dst.Port())).Run() == nil
}

// peersPolicyPhase: the connection rate to the ClusterIP with a
// 1,000-rule NetworkPolicy on its endpoint, enforced (the local pod, not
// allowed, is refused) on every setup, reps times in rotation; then the
// policy is removed.
func peersPolicyPhase(t *testing.T, rep *peers.Report, setups []*peerSetup, reps int, d time.Duration, self string) {
	row := "CPS to a ClusterIP, 1,000-rule NetworkPolicy"
	if !peersRowWanted(t, row) {
		return
	}
	// XLANE_PEERS_POLICY_RULES: another size of the policy (is the cost
	// flat in the rules?), recorded as a row of its own name.
	rules := 1000
	if v := os.Getenv("XLANE_PEERS_POLICY_RULES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("XLANE_PEERS_POLICY_RULES=%q: want a count ≥ 1", v)
		}
		rules, row = n, fmt.Sprintf("CPS to a ClusterIP, %d-rule NetworkPolicy", n)
	}
	ctx := context.Background()
	for _, s := range setups {
		if _, err := s.cp.cs.NetworkingV1().NetworkPolicies("default").Create(ctx, peersPolicy(rules), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: create the %d-rule NetworkPolicy: %v", s.info.Name, rules, err)
		}
	}
	server := func(s *peerSetup) netip.AddrPort { return netip.AddrPortFrom(s.remote.ip, peersConnPort) }
	for _, s := range setups {
		began := time.Now()
		waitFor(t, 2*time.Minute, s.info.Name+": the policy enforced", func() bool {
			return !s.local.reaches(server(s)) && s.client.reaches(server(s))
		})
		t.Logf("%s: the policy enforced %.1f s after its creation (at most)", s.info.Name, time.Since(began).Seconds())
	}
	for r := 1; r <= reps; r++ {
		for k := range setups {
			s := setups[(k+r-1)%len(setups)]
			s.cps(t, rep, r, row, func() (connrate.Result, error) { return s.conn(self, d) })
		}
	}
	for _, s := range setups {
		if err := s.cp.cs.NetworkingV1().NetworkPolicies("default").Delete(ctx, "peers-1000", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("%s: delete the NetworkPolicy: %v", s.info.Name, err)
		}
	}
	for _, s := range setups {
		waitFor(t, 2*time.Minute, s.info.Name+": the policy gone", func() bool { return s.local.reaches(server(s)) })
	}
}

// peersScalePhase: 10,000 more Services on each setup in turn (no
// selector; an EndpointSlice each with the remote pod's connection
// server), the time from the last API write until a sample of them (the
// last 20 and 80 spread over the rest) answers from the client pod, then
// the connection rate to the first Service among them (reps, rotated) and
// the agents' resident and BPF map memory, then the EndpointSlice
// changes of the first Service (peers_rows_test.go).
func peersScalePhase(t *testing.T, rep *peers.Report, setups []*peerSetup, reps int, d time.Duration, self string) {
	for _, s := range setups {
		began := time.Now()
		vips := s.createServices(t, peersScaleServices)
		s.probeVIP = vips[0]
		written := time.Now()
		var sample []netip.AddrPort
		for i := 0; i < len(vips)-20; i += (len(vips) - 20) / 80 {
			sample = append(sample, vips[i])
		}
		sample = append(sample, vips[len(vips)-20:]...)
		deadline := written.Add(5 * time.Minute)
		for {
			res, err := s.connFrom(self, s.client, sample, time.Second, "-conc", "16", "-timeout", "500ms")
			if err == nil && res.Failed == 0 && res.OK >= len(sample) {
				break
			}
			if time.Now().After(deadline) {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %d Services: the sample did not answer within 5 min of the last write (%v, %+v)", s.info.Name, peersScaleServices, err, res))
				t.Errorf("%s: %d Services not answering 5 min after the last write", s.info.Name, peersScaleServices)
				break
			}
		}
		lag := time.Since(written)
		rep.Add(s.info.Name, "10,000 Services: last API write to answering", 1, lag.Seconds())
		t.Logf("%s: %d Services written in %.1f s, answering %.2f s after the last write", s.info.Name, peersScaleServices, written.Sub(began).Seconds(), lag.Seconds())
	}
	for r := 1; r <= reps; r++ {
		for k := range setups {
			s := setups[(k+r-1)%len(setups)]
			s.cps(t, rep, r, "CPS to a ClusterIP, 10,000 Services", func() (connrate.Result, error) { return s.conn(self, d) })
		}
	}
	for _, s := range setups {
		rep.Add(s.info.Name, "agent RSS, 10,000 Services", 1, s.rss(t))
		s.bpfMaps(t, rep, "agent BPF map memory, 10,000 Services")
	}
	for _, s := range setups {
		peersChangePhase(t, rep, s, self, "peers-s00000", s.probeVIP.String())
	}
}

// createServices writes n Services without a selector, each with an
// EndpointSlice of the remote pod's connection server, from 16 workers
// (the clientset's own rate limit applies), and returns their ClusterIPs.
func (s *peerSetup) createServices(t *testing.T, n int) []netip.AddrPort {
	t.Helper()
	ctx := context.Background()
	vips := make([]netip.AddrPort, n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				name := fmt.Sprintf("peers-s%05d", i)
				svc, err := s.cp.cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "conn", Protocol: corev1.ProtocolTCP, Port: 80,
						TargetPort: intstr.FromInt32(peersConnPort)}}},
				}, metav1.CreateOptions{})
				if err == nil {
					vips[i] = netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
					_, err = s.cp.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
						ObjectMeta: metav1.ObjectMeta{Name: name,
							Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "xlane-e2e"}},
						AddressType: discoveryv1.AddressTypeIPv4,
						Endpoints: []discoveryv1.Endpoint{{Addresses: []string{s.remote.ip.String()},
							Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
						Ports: []discoveryv1.EndpointPort{{Name: ptr.To("conn"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(peersConnPort))}},
					}, metav1.CreateOptions{})
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s: %w", name, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatalf("%s: create %d Services: %v", s.info.Name, n, first)
	}
	return vips
}
