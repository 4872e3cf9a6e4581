package e2e

import (
	"encoding/json"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// cpuHog keeps one CPU busy (a shell busy loop pinned with taskset) until
// the test ends; it is killed by its pid.
func cpuHog(t *testing.T, cpu string) {
	t.Helper()
	cmd := exec.Command("taskset", "-c", cpu, "sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a CPU hog on CPU %s: %v", cpu, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	})
}

// TestCalibrateUnderLoad: a calibration with a CPU hog on one core (how a
// loaded machine made kernel mode "win" 5 of 7 first starts) still gives
// every network created with auto every feature it asks for: a CLI network
// masquerades, a Docker-style request (isolated, ICC off) is not refused;
// a network created before the calibration keeps its mode and features,
// across a restart and a switch to auto; the choice states its rule.
func TestCalibrateUnderLoad(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatalf("the hog takes CPU 1: this machine has %d CPU", runtime.NumCPU())
	}
	n := newNode(t)
	var before api.NetworkInfo
	n.mustXlane(&before, "network", "create", "old", "--subnet", "10.97.0.0/24", "--subnet", "fd00:97::/64", "--isolated")
	c1 := newNetns(t, "old")
	n.mustXlane(nil, "endpoint", "add", "old", "--netns", c1)

	cpuHog(t, "1")
	var c api.Calibration
	n.mustXlane(&c, "calibrate")
	ch := c.Choice
	if ch == nil {
		t.Fatalf("calibrate stored no choice: %+v", c)
	}
	t.Logf("under load: auto %s, ranking %v, took %s: %s", ch.Mode, ch.Ranked, ch.Took, ch.Reason)
	if ch.Rule == "" || c.Rule == "" || !strings.Contains(ch.Rule, "spreads do not overlap") {
		t.Errorf("the choice does not state its rule: %q / %q", ch.Rule, c.Rule)
	}
	if len(ch.Ranked) == 0 || ch.Ranked[len(ch.Ranked)-1] != ch.Default || ch.Default != "tc" {
		t.Errorf("ranking %v, default %q: want the default tc last", ch.Ranked, ch.Default)
	}

	var cli api.NetworkInfo
	n.mustXlane(&cli, "network", "create", "cli", "--subnet", "10.97.1.0/24", "--subnet", "fd00:97:1::/64")
	if !cli.Masquerade || cli.Mode == "kernel" {
		t.Errorf("CLI network with auto after a loaded calibration: mode %s, masquerade %v (%s); want masquerade", cli.Mode, cli.Masquerade, cli.ModeReason)
	}
	var dock api.NetworkInfo
	if o, e, err := n.xlane("network", "create", "dock", "--subnet", "10.97.2.0/24", "--isolated", "--icc=false", "-o", "json"); err != nil {
		t.Errorf("Docker-style network (isolated, ICC off) with auto refused: %v: %s", err, e)
	} else if err := json.Unmarshal([]byte(o), &dock); err != nil || !dock.Isolated || !dock.ICCOff || !dock.Masquerade {
		t.Errorf("Docker-style network: %+v, %v; want isolated, ICC off, masquerade", dock, err)
	}

	same := func(when string) {
		t.Helper()
		var now api.NetworkInfo
		n.mustXlane(&now, "network", "inspect", "old")
		if now.Mode != before.Mode || now.Masquerade != before.Masquerade || now.Isolated != before.Isolated ||
			now.BigTCP4 != before.BigTCP4 || now.BigTCP6 != before.BigTCP6 {
			t.Errorf("%s: network old is %s masq %v isolated %v big tcp %v/%v, was %s %v %v %v/%v", when,
				now.Mode, now.Masquerade, now.Isolated, now.BigTCP4, now.BigTCP6,
				before.Mode, before.Masquerade, before.Isolated, before.BigTCP4, before.BigTCP6)
		}
	}
	same("after the calibration")
	n.stop(syscall.SIGTERM)
	n.start()
	same("after a restart")
	var upd api.NetworkInfo
	n.mustXlane(&upd, "network", "update", "old", "--mode", "auto")
	if !upd.Masquerade || !upd.Isolated || upd.Mode == "kernel" {
		t.Errorf("network old switched to auto: mode %s masquerade %v isolated %v (%s); want every feature kept", upd.Mode, upd.Masquerade, upd.Isolated, upd.ModeReason)
	}
}
