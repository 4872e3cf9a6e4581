package accel

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Cgroup2Root finds where the cgroup2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid systems).
func Cgroup2Root() (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", errors.New("no cgroup2 filesystem is mounted")
}

// DefaultCgroup is xlane's own cgroup under the cgroup2 root: "xlane".
const DefaultCgroup = "xlane"

// Config is what acceleration is enabled with.
type Config struct {
	// Cgroup is the cgroup2 directory whose processes' sockets are
	// accelerated (and its descendants'). Never the root.
	Cgroup string `json:"cgroup"`
	// Nets: both ends of a connection must be in one of them. Empty:
	// loopback only (127.0.0.0/8, ::1/128).
	Nets []netip.Prefix `json:"nets,omitempty"`
	// Ports: one end's port must be one of them. Empty: any port.
	Ports []uint16 `json:"ports,omitempty"`
}

// Loopback are the default Nets.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// ErrBadConfig is wrapped by every validation error.
var ErrBadConfig = errors.New("invalid acceleration settings")

// CheckCgroup checks that path is a cgroup2 directory other than the root
// and returns it cleaned.
func CheckCgroup(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%w: cgroup: empty path", ErrBadConfig)
	}
	if !filepath.IsAbs(path) {
		root, err := Cgroup2Root()
		if err != nil {
			return "", fmt.Errorf("%w: cgroup %s: %w", ErrBadConfig, path, err)
		}
		path = filepath.Join(root, path)
	}
	path = filepath.Clean(path)
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", fmt.Errorf("%w: cgroup %s: %w", ErrBadConfig, path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("%w: cgroup %s: not on a cgroup2 filesystem", ErrBadConfig, path)
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: cgroup %s: not a directory", ErrBadConfig, path)
	}
	if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("%w: cgroup %s: not a cgroup directory", ErrBadConfig, path)
	}
	// The root of a cgroup2 mount: its parent is on another filesystem.
	var up unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &up); err != nil || up.Type != unix.CGROUP2_SUPER_MAGIC || path == "/" {
		return "", fmt.Errorf("%w: cgroup %s: the root cgroup (every process of the machine) is refused; name the cgroup of the processes to accelerate", ErrBadConfig, path)
	}
	return path, nil
}

// Validate checks c and fills defaults (the cgroup path cleaned, Nets
// loopback when empty).
func (c *Config) Validate() error {
	p, err := CheckCgroup(c.Cgroup)
	if err != nil {
		return err
	}
	c.Cgroup = p
	return c.ValidateSettings()
}

// ValidateSettings is Validate without the cgroup check: for a cgroup
// that is created only once the request is applied (xlane's own).
func (c *Config) ValidateSettings() error {
	if len(c.Nets) == 0 {
		c.Nets = slices.Clone(Loopback)
	}
	for i, n := range c.Nets {
		if !n.IsValid() {
			return fmt.Errorf("%w: net %d: invalid prefix", ErrBadConfig, i)
		}
		if n.Bits() == 0 {
			return fmt.Errorf("%w: net %s: a prefix must not cover every address", ErrBadConfig, n)
		}
		c.Nets[i] = n.Masked()
	}
	for _, p := range c.Ports {
		if p == 0 {
			return fmt.Errorf("%w: port 0", ErrBadConfig)
		}
	}
	return nil
}
