package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/calibrate"
	"github.com/xlane-dev/xlane/internal/model"
)

// A calibration that measured kernel mode fastest (as a loaded machine's
// did in 5 of 7 first starts) must cost no network a feature: auto gives
// a CLI network created with no flags its masquerade, a Docker-style
// request (isolated, ICC off) is not refused, and switching a network to
// auto keeps every feature it has. Only a network asking for nothing
// kernel mode lacks may take kernel mode.
func TestAutoKeepsFeatures(t *testing.T) {
	inNode(t, func(d *Daemon) {
		if err := d.dp.Available(); err != nil {
			t.Fatalf("no BPF datapath (root on a kernel with BPF is required): %v", err)
		}
		d.f.Calibration.SetChoice(&calibrate.Choice{Mode: string(model.ModeKernel), Reason: "kernel: fastest here", At: time.Now()})
		off, on := false, true
		for _, c := range []struct {
			req      api.NetworkCreate
			bpf      bool
			masq     bool
			isolated bool
		}{
			{req: api.NetworkCreate{Name: "cli", Subnets: []string{"10.58.0.0/24"}}, bpf: true, masq: true},
			{req: api.NetworkCreate{Name: "masq", Subnets: []string{"10.58.1.0/24"}, Masquerade: &on}, bpf: true, masq: true},
			{req: api.NetworkCreate{Name: "docker", Subnets: []string{"10.58.2.0/24"}, Isolated: true, ICC: &off}, bpf: true, masq: true, isolated: true},
			{req: api.NetworkCreate{Name: "routed", Subnets: []string{"10.58.3.0/24"}, Masquerade: &off}, bpf: true},
			// Nothing kernel mode lacks: the calibration's choice.
			{req: api.NetworkCreate{Name: "plain", Subnets: []string{"10.58.4.0/24"}, Masquerade: &off, Internal: true}},
		} {
			n, err := d.CreateNetwork(c.req)
			if err != nil {
				t.Errorf("create %s with auto after a kernel calibration: %v", c.req.Name, err)
				continue
			}
			if n.Mode.BPF() != c.bpf || n.Masquerade != c.masq || n.Isolated != c.isolated {
				t.Errorf("network %s: mode %s masquerade %v isolated %v (%s); want a BPF mode %v, masquerade %v, isolated %v",
					n.Name, n.Mode, n.Masquerade, n.Isolated, n.ModeReason, c.bpf, c.masq, c.isolated)
			}
			if c.bpf && !strings.Contains(n.ModeReason, "kernel has no") {
				t.Errorf("network %s: reason %q does not say what kernel mode lacks", n.Name, n.ModeReason)
			}
		}
		// A switch to auto re-resolves under the same guard.
		if _, err := d.CreateNetwork(api.NetworkCreate{Name: "tcnet", Subnets: []string{"10.58.5.0/24"}, Mode: "tc"}); err != nil {
			t.Fatal(err)
		}
		n, err := d.UpdateNetwork("tcnet", api.NetworkUpdate{Mode: "auto"})
		if err != nil || !n.Mode.BPF() || !n.Masquerade {
			t.Errorf("switch a masquerading tc network to auto: %+v, %v; want a BPF mode, masquerade kept", n, err)
		}
	})
}
