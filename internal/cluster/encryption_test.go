package cluster

import (
	"errors"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// TestParseEncryption: --encryption is checked with the cluster flags,
// before anything is applied; the error names the flag; with encryption
// the overlay encapsulates in the VXLAN device (its packets then route
// into the WireGuard device).
func TestParseEncryption(t *testing.T) {
	base := Config{NodeName: "n1", ClusterCIDRs: []string{"10.244.0.0/16"}, Encryption: "wireguard"}
	for _, tc := range []struct {
		name  string
		mod   func(c *Config)
		field string
	}{
		{"wireguard", func(*Config) {}, ""},
		{"wireguard, encap auto", func(c *Config) { c.OverlayEncap = "auto" }, ""},
		{"wireguard, encap device", func(c *Config) { c.OverlayEncap = "device" }, ""},
		{"none", func(c *Config) { c.Encryption = "none" }, ""},
		{"unknown", func(c *Config) { c.Encryption = "ipsec" }, "encryption"},
		{"encap bpf", func(c *Config) { c.OverlayEncap = "bpf" }, "overlay-encap"},
		{"native routing", func(c *Config) { c.Routing = "native" }, "encryption"},
		{"alone", func(c *Config) { *c = Config{Encryption: "wireguard"} }, "node-name"},
		{"strict", func(c *Config) { c.EncryptionStrict = true }, ""},
		{"strict without encryption", func(c *Config) { c.Encryption, c.EncryptionStrict = "", true }, "encryption-strict"},
		{"node traffic", func(c *Config) { c.EncryptionNode = true }, ""},
		{"node traffic without encryption", func(c *Config) { c.Encryption, c.EncryptionNode = "", true }, "encryption-node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mod(&cfg)
			c, err := New(nil, cfg)
			if tc.field != "" {
				var fe *model.FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("error %v, want a %s field error", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := cfg.Encryption == "wireguard"; c.encrypt != want || want && c.encap != model.EncapDevice {
				t.Errorf("encrypt %v encap %q, want encrypt %v (and device encapsulation)", c.encrypt, c.encap, want)
			}
		})
	}
}
