package docker

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// dockerd sets the FORWARD policy of iptables to DROP and accepts only what
// its own bridges forward. xlane endpoints are routed by the node: whatever
// Linux forwards for them (everything in kernel mode; in the BPF modes, what
// comes from the node or from off-node, and what the datapath hands to Linux)
// would be dropped. These rules, appended after Docker's own (Docker inserts
// its jumps at the top, so DOCKER-USER still sees xlane's traffic first),
// accept what goes to or comes from an xlane host veth (xlh*, see the
// daemon's hostIfNames). They are there while a Docker network of xlane's
// exists.
var forwardRules = [][]string{
	{"FORWARD", "-i", "xlh+", "-m", "comment", "--comment", "xlane: traffic of xlane endpoints", "-j", "ACCEPT"},
	{"FORWARD", "-o", "xlh+", "-m", "comment", "--comment", "xlane: traffic of xlane endpoints", "-j", "ACCEPT"},
}

// iptablesBins are the tools that manage the tables Docker uses; a missing
// one means no firewall of that family to get along with.
var iptablesBins = []string{"iptables", "ip6tables"}

func ipt(bin string, args ...string) error {
	out, err := exec.Command(bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// allowForwarding adds the rules that are missing.
func allowForwarding() error {
	var errs []error
	for _, bin := range iptablesBins {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		for _, r := range forwardRules {
			if ipt(bin, append([]string{"-C"}, r...)...) == nil {
				continue
			}
			errs = append(errs, ipt(bin, append([]string{"-A"}, r...)...))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("let Docker's firewall forward xlane traffic: %w", err)
	}
	return nil
}

// removeForwarding deletes the rules (every copy). Missing ones are fine.
func removeForwarding() error {
	var errs []error
	for _, bin := range iptablesBins {
		if _, err := exec.LookPath(bin); err != nil {
			continue
		}
		for _, r := range forwardRules {
			for i := 0; i < 8 && ipt(bin, append([]string{"-C"}, r...)...) == nil; i++ {
				errs = append(errs, ipt(bin, append([]string{"-D"}, r...)...))
			}
		}
	}
	return errors.Join(errs...)
}
