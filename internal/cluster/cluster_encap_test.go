package cluster

import (
	"errors"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestParseClusterEncap: --overlay-encap is validated with the other
// cluster flags, before anything is applied, and the error names the
// field; auto resolves to the measured choice.
func TestParseClusterEncap(t *testing.T) {
	base := Config{NodeName: "n1", ClusterCIDRs: []string{"10.244.0.0/16"}}
	for _, tc := range []struct {
		name           string
		mod            func(c *Config)
		want           model.Encap
		wantErrField   string
		wantErrMessage string
	}{
		{"default is auto", func(*Config) {}, model.EncapAutoChoice, "", ""},
		{"auto", func(c *Config) { c.OverlayEncap = "auto" }, model.EncapAutoChoice, "", ""},
		{"bpf", func(c *Config) { c.OverlayEncap = "bpf" }, model.EncapBPF, "", ""},
		{"device", func(c *Config) { c.OverlayEncap = "device" }, model.EncapDevice, "", ""},
		{"unknown", func(c *Config) { c.OverlayEncap = "ebpf" }, "", "overlay-encap", `"ebpf": want bpf, device or auto`},
		{"native routing", func(c *Config) { c.Routing, c.OverlayEncap = "native", "bpf" }, "", "overlay-encap", `"bpf": native routing does not encapsulate (it needs --routing vxlan)`},
		{"native routing, auto", func(c *Config) { c.Routing, c.OverlayEncap = "native", "auto" }, "", "", ""},
		{"alone", func(c *Config) { *c = Config{OverlayEncap: "device"} }, "", "node-name", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			c, err := New(nil, cfg)
			if tc.wantErrField != "" {
				var fe *model.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.wantErrField || tc.wantErrMessage != "" && fe.Reason != tc.wantErrMessage {
					t.Fatalf("error %v, want a %s field error %q", err, tc.wantErrField, tc.wantErrMessage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.encap != tc.want {
				t.Errorf("encap %q, want %q", c.encap, tc.want)
			}
		})
	}
}
