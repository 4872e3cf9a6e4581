package harness

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Preflight checks what a benchmark needs before it touches anything:
// root (rootFor says what for), the tools on PATH, with bpffs a bpffs at
// /sys/fs/bpf, which it mounts there when nothing is (a freshly booted
// Debian has none; xlaned does the same, internal/datapath); and it makes
// NetnsDir.
func Preflight(rootFor string, bpffs bool, tools ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (%s)", rootFor)
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing tools: %s", strings.Join(missing, ", "))
	}
	if bpffs {
		var st syscall.Statfs_t
		if err := syscall.Statfs("/sys/fs/bpf", &st); err != nil {
			return fmt.Errorf("bpffs: %w", err)
		}
		if st.Type != unix.BPF_FS_MAGIC {
			if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
				return fmt.Errorf("mount bpffs on /sys/fs/bpf: %w", err)
			}
		}
	}
	return os.MkdirAll(NetnsDir, 0o755)
}
