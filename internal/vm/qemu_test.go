package vm

import (
	"strings"
	"testing"
)

// The AF_XDP port needs QEMU's af-xdp backend with map-path= (10.1+):
// which QEMU is refused, and with what reason.
func TestAFXDPMissing(t *testing.T) {
	for _, c := range []struct {
		ver     string
		backend bool
		want    string // "" offered, else a part of the reason
	}{
		{"QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)", false, "no af-xdp netdev backend"},
		{"QEMU emulator version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)", true, "no map-path="},
		{"QEMU emulator version 8.2.0", true, "no map-path="},
		{"QEMU emulator version 10.1.0", true, ""},
		{"QEMU emulator version 10.2.2 (Debian 1:10.2.2+ds-1)", true, ""},
		{"QEMU emulator version 11.0.0", true, ""},
		{"something else", true, "cannot read its version"},
	} {
		got := afxdpMissing("/q", c.ver, c.backend)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%q (af-xdp %v): %q, want %q", c.ver, c.backend, got, c.want)
		}
	}
}
