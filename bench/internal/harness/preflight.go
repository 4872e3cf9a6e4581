package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// Preflight checks what a benchmark needs before it touches anything:
// root (rootFor says what for), the tools on PATH, with bpffs a bpffs
// mounted at /sys/fs/bpf; and it makes NetnsDir.
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
		if err := syscall.Statfs("/sys/fs/bpf", &st); err != nil || st.Type != 0xcafe4a11 {
			return errors.New("/sys/fs/bpf is not a mounted bpffs")
		}
	}
	return os.MkdirAll(NetnsDir, 0o755)
}
