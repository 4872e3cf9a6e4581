package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrMountsHidden: xlaned runs in a mount namespace that hides the node's
// cgroup2 or BPF filesystem, as `ip netns exec` makes one (it remounts
// /sys for the namespace: /sys/fs/cgroup/* and /sys/fs/bpf are gone).
// Such a daemon would pin into a private bpffs that dies with it (a
// restart then loses every program and map) and could attach no socket
// program (the node's own processes would lose services and published
// ports) while reporting itself healthy. It refuses to start instead:
// docs/architecture.md says why not to work around it.
var ErrMountsHidden = errors.New("the node's mounts are hidden from xlaned")

// checkMounts refuses to run where the filesystems xlaned needs are
// mounted for pid 1 but not for this process. The mount tables are
// compared, not the namespaces' identities: /proc/1/ns/mnt cannot always
// be read from inside `ip netns exec` (seen here), /proc/1/mountinfo can.
// Where pid 1 sees what xlaned sees (its mount namespace, or a container
// given the mounts) it says nothing.
func checkMounts() error {
	ours, theirs := mountedTypes("/proc/self/mountinfo"), mountedTypes("/proc/1/mountinfo")
	var hidden []string
	for _, fs := range []string{"cgroup2", "bpf"} {
		if theirs[fs] != "" && ours[fs] == "" {
			hidden = append(hidden, fs+" (on "+theirs[fs]+" for pid 1)")
		}
	}
	if len(hidden) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this mount namespace has no %s, as under `ip netns exec`, which remounts /sys: "+
		"enter only the network namespace instead: nsenter --net=/run/netns/NAME xlaned ...", ErrMountsHidden, strings.Join(hidden, " and no "))
}

// mountedTypes maps the filesystem types mounted in a mountinfo file to
// the first mount point of each.
func mountedTypes(path string) map[string]string {
	out := map[string]string{}
	raw, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(raw), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, typ := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(typ) < 1 {
			continue
		}
		if out[typ[0]] == "" {
			out[typ[0]] = f[4]
		}
	}
	return out
}
