package firewall_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/firewall"
	"github.com/xlane-dev/xlane/internal/firewall/fwtest"
	"github.com/xlane-dev/xlane/internal/model"
)

// Every invalid rule is refused with an error that names the rule and
// the field.
func TestValidateErrorsNameRuleAndField(t *testing.T) {
	for _, c := range []struct {
		yaml, field, says string
	}{
		{"rules: [{name: a, action: drop, proto: tcp, dport: 70000}]", "rules[a].dport", "70000"},
		{"rules: [{name: a, action: drop, proto: tcp, dport: 90-80}]", "rules[a].dport", "ends before it starts"},
		{"rules: [{name: a, action: drop, dport: 80}]", "rules[a].dport", "need proto tcp or udp"},
		{"rules: [{name: a, action: drop, proto: icmp, dport: 80}]", "rules[a].dport", "need proto tcp or udp"},
		{"rules: [{name: a, action: maybe}]", "rules[a].action", "maybe"},
		{"rules: [{name: a}]", "rules[a].action", "missing"},
		{"rules: [{name: a, action: drop, src: 10.0.0.0/33}]", "rules[a].src", "10.0.0.0/33"},
		{"rules: [{name: a, action: drop, src: 10.0.0.0/8, dst: 'fd00::/8'}]", "rules[a].dst", "no address family"},
		{"rules: [{name: a, action: drop, scope: network:nope}]", "rules[a].scope", "no network called"},
		{"rules: [{name: a, action: drop, scope: endpoint:nope}]", "rules[a].scope", "no endpoint"},
		{"rules: [{name: a, action: drop, scope: endpoint:g1, src: 10.9.0.0/16, direction: from-endpoint}]", "rules[a].src", "no address of the endpoint"},
		{"rules: [{name: a, action: drop, scope: uplink, direction: out}]", "rules[a].direction", "one direction"},
		{"rules: [{name: a, action: drop, proto: udp, tcp_flags: syn}]", "rules[a].tcp_flags", "needs proto tcp"},
		{"rules: [{name: a, action: drop, proto: tcp, tcp_flags: 'SYN/FOO'}]", "rules[a].tcp_flags", "FOO"},
		{"rules: [{name: a, action: drop, proto: icmp, icmp_type: 300}]", "rules[a].icmp_type", "300"},
		{"rules: [{name: a, action: drop, src_mac: 'zz:00'}]", "rules[a].src_mac", "zz:00"},
		{"rules: [{name: a, action: drop, priority: -3}]", "rules[a].priority", "-3"},
		{"rules: [{name: a, action: drop, family: ipv5}]", "rules[a].family", "ipv5"},
		{"rules: [{name: a, action: drop}, {name: a, action: allow}]", "rules[a].name", "two rules"},
		{"rules: [{name: 'a b', action: drop}]", "rules[a b].name", "a b"},
		{"rules: [{action: drop}]", "rules[0].name", "missing"},
		{"rules: [{name: a, action: drop}, {name: " + strings.Repeat("n", 65) + ", action: drop}]", "rules[1].name", "(65 bytes)"},
		{"rules: [{name: a, action: drop, comment: " + strings.Repeat("c", 1025) + "}]", "rules[a].comment", "1025 bytes: at most 1024"},
		{"defaults: [{scope: network:blue, action: log}]", "defaults[0].action", "log"},
		{"defaults: [{action: drop}, {action: allow}]", "defaults[1].scope", "already"},
		{"rules: [{name: a, action: drop, prot: tcp}]", "file", "prot"},
		{"rules: [{name: a, action: drop, dport: {a: 1}}]", "file", "mapping"},
		{"rules: [{name: a, action: drop, direction: from-endpoint, dst_names: [example.com]}]", "rules[a].dst_names", "only in allow rules"},
		{"rules: [{name: a, action: allow, dst_names: [example.com]}]", "rules[a].direction", "need direction from-endpoint"},
		{"rules: [{name: a, action: allow, direction: from-endpoint, dst: 10.0.0.1, dst_names: [example.com]}]", "rules[a].dst_names", "with dst"},
		{"rules: [{name: a, action: allow, direction: from-endpoint, dst_names: []}]", "rules[a].dst_names", "empty"},
		{"rules: [{name: a, action: allow, direction: from-endpoint, dst_names: [example.com, 'www.*.example.com']}]", "rules[a].dst_names[1]", "www.*.example.com"},
	} {
		rs, err := firewall.Parse([]byte(c.yaml))
		if err == nil {
			_, err = firewall.Validate(rs, fwtest.Resolver())
		}
		var fe *model.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: error %v, want a field error", c.yaml, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(err.Error(), c.says) || len(err.Error()) > 300 {
			t.Errorf("%s:\n\terror %q (field %q)\n\twant field %q saying %q", c.yaml, err, fe.Field, c.field, c.says)
		}
	}
}

func TestValidateAccepts(t *testing.T) {
	rs, err := firewall.Parse([]byte(`
established: false
defaults:
  - {scope: network:blue, direction: to-endpoint, action: drop}
  - {scope: uplink, action: allow}
rules:
  - name: web
    scope: network:blue
    direction: to-endpoint
    proto: [tcp]
    dport: [80, 443, "8000-8080"]
  # action missing below is an error; this one is complete
    action: allow
  - {name: ssh, scope: endpoint:b1, proto: tcp, dport: 22, src: [10.0.0.0/8, "fd00::/8"], action: allow, log: 10}
  - {name: ping, proto: icmp, icmp_type: echo-request, action: allow}
  - {name: ping6, proto: icmpv6, icmp_type: [128, 129], action: allow}
  - {name: syn, proto: tcp, tcp_flags: syn, action: log}
  - {name: mac, src_mac: "02:00:00:00:00:01", action: drop, priority: 5}
  - {name: mapped, src: "::ffff:10.0.0.0/104", action: drop}
`))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := firewall.Validate(rs, fwtest.Resolver())
	if err != nil {
		t.Fatal(err)
	}
	if pol.Established || pol.Rules[0].Name != "mac" || pol.Rules[len(pol.Rules)-1].Name != "default:uplink:uplink" {
		var names []string
		for _, r := range pol.Rules {
			names = append(names, r.Name)
		}
		t.Fatalf("policy order %v (established %v)", names, pol.Established)
	}
	for _, r := range pol.Rules {
		if r.Name == "ssh" && len(r.Matches) != 2 {
			t.Errorf("endpoint rule in both directions: %d matches, want 2", len(r.Matches))
		}
		if r.Name == "mapped" && (len(r.Matches[0].Src4) != 1 || r.Matches[0].Src4[0].String() != "10.0.0.0/8") {
			t.Errorf("v4-mapped prefix: %v", r.Matches[0].Src4)
		}
	}
}

// ValidateLive keeps rules whose endpoint is gone, inactive.
func TestValidateLive(t *testing.T) {
	rs := &firewall.RuleSet{Rules: []firewall.Rule{{Name: "a", Action: "drop", Scope: "endpoint:gone"}, {Name: "b", Action: "drop"}}}
	if _, err := firewall.Validate(rs, fwtest.Resolver()); err == nil {
		t.Fatal("Validate accepted a missing endpoint")
	}
	pol, err := firewall.ValidateLive(rs, fwtest.Resolver())
	if err != nil {
		t.Fatal(err)
	}
	if len(pol.Rules) != 2 || len(pol.Rules[0].Matches) != 0 || len(pol.Rules[1].Matches) != 1 {
		t.Fatalf("live policy: %+v", pol.Rules)
	}
}

// FuzzParseRuleSet: any input either fails to parse or validate with a
// field error, or compiles into tables that agree with the reference
// model; YAML round trips are stable.
func FuzzParseRuleSet(f *testing.F) {
	f.Add([]byte("rules: [{name: a, action: drop, proto: tcp, dport: 80}]"))
	f.Add([]byte("defaults: [{scope: uplink, action: drop}]\nrules: [{name: s, scope: endpoint:b1, src: 10.0.0.0/8, action: allow}]"))
	f.Add([]byte("rules: [{name: i, proto: icmpv6, icmp_type: 1/4, action: reject, log: 3}]"))
	f.Add([]byte("rules: [{name: f, proto: tcp, tcp_flags: 'SYN,ACK/SYN', src_mac: 02:00:00:00:00:01, sport: [1-2, 5], action: log}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := firewall.Parse(data)
		if err != nil {
			return
		}
		pol, err := firewall.Validate(rs, fwtest.Resolver())
		if err != nil {
			var fe *model.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("validation error without a field: %v", err)
			}
			return
		}
		y, err := firewall.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		rs2, err := firewall.Parse(y)
		if err != nil {
			t.Fatalf("re-parse of\n%s: %v", y, err)
		}
		if _, err := firewall.Validate(rs2, fwtest.Resolver()); err != nil {
			t.Fatalf("re-validate of\n%s: %v", y, err)
		}
		tab, err := firewall.Compile(pol, slotsFor(pol))
		if err != nil {
			if strings.Contains(err.Error(), "classifier bits") {
				return
			}
			t.Fatal(err)
		}
		rng := newRand(data)
		for i := 0; i < 50; i++ {
			k := []firewall.Kind{firewall.KindFromEP, firewall.KindToEP, firewall.KindUplink}[i%3]
			pk := fwtest.RandomPacket(rng, k)
			want, _ := pol.Evaluate(pk)
			bit, _ := tab.Classify(pk)
			got := -1
			if bit >= 0 {
				got = tab.Bit[bit]
			}
			if got != want {
				t.Fatalf("packet %+v: tables %d, reference %d", pk, got, want)
			}
		}
	})
}
