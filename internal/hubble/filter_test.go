package hubble

import (
	"testing"

	flowpb "github.com/cilium/cilium/api/v1/flow"
)

func TestFilters(t *testing.T) {
	web := &flowpb.Flow{Verdict: flowpb.Verdict_TRANSLATED,
		IP:                 &flowpb.IP{Source: "10.84.0.3", Destination: "10.84.0.2"},
		L4:                 &flowpb.Layer4{Protocol: &flowpb.Layer4_TCP{TCP: &flowpb.TCP{SourcePort: 40000, DestinationPort: 80, Flags: &flowpb.TCPFlags{SYN: true}}}},
		Source:             &flowpb.Endpoint{Namespace: "shop", PodName: "client", Labels: []string{"k8s:app=client", "xlane:network=shop"}},
		Destination:        &flowpb.Endpoint{Namespace: "shop", PodName: "web-1"},
		DestinationService: &flowpb.Service{Namespace: "shop", Name: "websvc"},
		NodeName:           "node-a",
	}
	for _, c := range []struct {
		name string
		ff   *flowpb.FlowFilter
		want bool
	}{
		{"source pod", &flowpb.FlowFilter{SourcePod: []string{"shop/client"}}, true},
		{"pod prefix", &flowpb.FlowFilter{DestinationPod: []string{"shop/web"}}, true},
		{"namespace only", &flowpb.FlowFilter{DestinationPod: []string{"shop/"}}, true},
		{"other namespace", &flowpb.FlowFilter{SourcePod: []string{"default/client"}}, false},
		{"service no namespace", &flowpb.FlowFilter{DestinationService: []string{"websvc"}}, true},
		{"service", &flowpb.FlowFilter{DestinationService: []string{"shop/websvc"}}, true},
		{"service other", &flowpb.FlowFilter{DestinationService: []string{"shop/db"}}, false},
		{"cidr", &flowpb.FlowFilter{DestinationIp: []string{"10.84.0.0/24"}}, true},
		{"ip other", &flowpb.FlowFilter{SourceIp: []string{"10.84.0.2"}}, false},
		{"label", &flowpb.FlowFilter{SourceLabel: []string{"app=client"}}, true},
		{"label with source", &flowpb.FlowFilter{SourceLabel: []string{"k8s:app=client,xlane:network"}}, true},
		{"label absent", &flowpb.FlowFilter{SourceLabel: []string{"!app"}}, false},
		{"label other", &flowpb.FlowFilter{SourceLabel: []string{"app!=client"}}, false},
		{"verdict", &flowpb.FlowFilter{Verdict: []flowpb.Verdict{flowpb.Verdict_DROPPED}}, false},
		{"port", &flowpb.FlowFilter{DestinationPort: []string{"80"}}, true},
		{"protocol", &flowpb.FlowFilter{Protocol: []string{"udp"}}, false},
		{"tcp flags", &flowpb.FlowFilter{TcpFlags: []*flowpb.TCPFlags{{SYN: true}}}, true},
		{"tcp flags missing", &flowpb.FlowFilter{TcpFlags: []*flowpb.TCPFlags{{SYN: true, ACK: true}}}, false},
		{"node glob", &flowpb.FlowFilter{NodeName: []string{"node-*"}}, true},
		{"and", &flowpb.FlowFilter{SourcePod: []string{"shop/client"}, DestinationPort: []string{"81"}}, false},
	} {
		fs, err := compileFilters("whitelist", []*flowpb.FlowFilter{c.ff})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := fs.any(web); got != c.want {
			t.Errorf("%s: %v matches %v, want %v", c.name, c.ff, got, c.want)
		}
	}
}
