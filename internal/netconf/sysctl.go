package netconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Forwarding6All is the sysctl EnsureNetwork sets for an IPv6 subnet.
// Writing it also sets default/forwarding and every interface's
// forwarding (addrconf_fixup_forwarding), so all of them are what it
// changes.
const Forwarding6All = "net/ipv6/conf/all/forwarding"

// Forwarding4 is the sysctl that lets Linux forward IPv4 packets arriving
// on dev (EnableForwarding sets it).
func Forwarding4(dev string) string { return "net/ipv4/conf/" + dev + "/forwarding" }

// ReadSysctl returns the value of sysctl p (a path under /proc/sys).
func ReadSysctl(p string) (string, error) {
	raw, err := os.ReadFile(filepath.Join("/proc/sys", p))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return strings.TrimSpace(string(raw)), nil
}

// Forwarding6Before returns the values that setting
// net.ipv6.conf.all.forwarding changes: all, default and every existing
// interface's forwarding, for RestoreSysctls.
func Forwarding6Before() (map[string]string, error) {
	dirs, err := filepath.Glob("/proc/sys/net/ipv6/conf/*/forwarding")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range dirs {
		raw, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // an interface that just went away
			}
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		out[strings.TrimPrefix(p, "/proc/sys/")] = strings.TrimSpace(string(raw))
	}
	if _, ok := out[Forwarding6All]; !ok {
		return nil, fmt.Errorf("read %s: IPv6 is not there", Forwarding6All)
	}
	return out, nil
}

// RestoreSysctls writes saved values back. The "all" ones go first, since
// writing them resets the per-interface ones; interfaces that are gone
// are skipped.
func RestoreSysctls(saved map[string]string) error {
	keys := make([]string, 0, len(saved))
	for k := range saved {
		keys = append(keys, k)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		return strings.Contains(keys[i], "/all/") && !strings.Contains(keys[j], "/all/")
	})
	var errs []error
	for _, k := range keys {
		if _, err := os.Stat(filepath.Join("/proc/sys", k)); errors.Is(err, os.ErrNotExist) {
			continue
		}
		errs = append(errs, sysctl(k, saved[k]))
	}
	return errors.Join(errs...)
}
