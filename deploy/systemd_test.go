package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
)

// unitKeys reads a systemd unit file: section.Key -> values, in order.
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q: not KEY=VALUE", path, line)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	return keys
}

// xlanedDefault is the default of an xlaned string flag, from its source.
func xlanedDefault(t *testing.T, flag string) string {
	t.Helper()
	src, err := os.ReadFile("../cmd/xlaned/main.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`fs\.String\("` + flag + `", "([^"]*)"`).FindSubmatch(src)
	if m == nil {
		t.Fatalf("cmd/xlaned/main.go: no string flag %q with a literal default", flag)
	}
	return string(m[1])
}

// TestSystemdUnit: deploy/systemd/xlaned.service passes systemd-analyze
// verify without a warning, restarts always, gives xlaned only flags it
// has, and the paths it names are xlaned's defaults (the CLI's socket).
func TestSystemdUnit(t *testing.T) {
	const unit = "systemd/xlaned.service"
	keys := unitKeys(t, unit)
	if got := keys["Service.Restart"]; len(got) != 1 || got[0] != "always" {
		t.Errorf("Restart=%v, want always", got)
	}
	exec1 := keys["Service.ExecStart"]
	if len(exec1) != 1 {
		t.Fatalf("ExecStart=%v, want one", exec1)
	}
	args := strings.Fields(exec1[0])
	if filepath.Base(args[0]) != "xlaned" {
		t.Errorf("ExecStart runs %s, want xlaned", args[0])
	}
	flags := xlanedFlags(t)
	vals := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "$XLANED_OPTS" {
			continue
		}
		name, val, eq := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !flags[name] {
			t.Errorf("ExecStart: xlaned has no flag %q", a)
			continue
		}
		if !eq && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val = args[i+1]
			i++
		}
		vals[name] = val
	}
	if !strings.Contains(exec1[0], "$XLANED_OPTS") || !slices.Contains(keys["Service.EnvironmentFile"], "-/etc/default/xlaned") {
		t.Errorf("the unit takes no flags from EnvironmentFile=-/etc/default/xlaned ($XLANED_OPTS): %v %v", exec1, keys["Service.EnvironmentFile"])
	}
	for flag, want := range map[string]string{"state": xlanedDefault(t, "state"), "pin-dir": xlanedDefault(t, "pin-dir"), "socket": api.DefaultSocket} {
		if vals[flag] != want {
			t.Errorf("ExecStart --%s %q, want xlaned's default %q", flag, vals[flag], want)
		}
	}
	if d := keys["Service.StateDirectory"]; len(d) != 1 || "/var/lib/"+d[0] != filepath.Dir(vals["state"]) {
		t.Errorf("StateDirectory=%v does not hold --state %s", d, vals["state"])
	}
	if d := keys["Service.RuntimeDirectory"]; len(d) != 1 || "/run/"+d[0] != filepath.Dir(vals["socket"]) {
		t.Errorf("RuntimeDirectory=%v does not hold --socket %s", d, vals["socket"])
	}

	// systemd-analyze verify in a root of its own: the machine's unit
	// directory (sysinit.target, ...) and a stand-in executable where
	// ExecStart looks (verify checks it is executable, nothing runs).
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze: %v (scripts/deps.sh installs systemd)", err)
	}
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(args[0]), "/etc/systemd/system", "/usr/lib/systemd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy the unit directory: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, args[0]), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "etc/systemd/system/xlaned.service")
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", "--root="+root, dst).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}
}
