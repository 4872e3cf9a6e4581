package accelproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/accel"
	"github.com/xlane-dev/xlane/internal/store"
)

// xlane's own cgroup (accel.DefaultCgroup under the cgroup2 root) is
// where acceleration and outbound proxy redirects act when a request names
// no cgroup. Its life cycle: a request without --cgroup is validated
// against the path without creating anything; the directory is made only
// when the request is applied (ensureOwnCgroup), and removed
// (releaseOwnCgroup) once no record of this daemon names it, no process
// or child cgroup is in it (the kernel refuses the rmdir then) and no
// program is attached to it (another xlaned on the machine may use it):
// after a failed apply, `accel disable`, `proxy rm`, at start, and by
// --uninstall.

// detachWait bounds the wait for links just let go to be released.
const detachWait = 2 * time.Second

// ownCgroupName is the directory's name; tests give theirs.
var ownCgroupName = accel.DefaultCgroup

// ownCgroup is the path of xlane's cgroup.
func ownCgroup() (string, error) {
	root, err := accel.Cgroup2Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ownCgroupName), nil
}

// ensureOwnCgroup creates xlane's cgroup if path is it.
func ensureOwnCgroup(path string) error {
	own, err := ownCgroup()
	if err != nil || path != own {
		return nil
	}
	if err := os.Mkdir(own, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create xlane's cgroup %s: %w", own, err)
	}
	return nil
}

// ownCgroupUsed says whether a record names xlane's cgroup.
func (ap *Control) ownCgroupUsed(own string) (bool, error) {
	used := false
	err := ap.c.Store().View(func(tx *store.Tx) error {
		a, err := tx.Accel()
		if err != nil {
			return err
		}
		ps, err := tx.ProxyRedirects()
		used = a.Enabled && a.Config.Cgroup == own ||
			slices.ContainsFunc(ps, func(p store.ProxyRecord) bool { return p.Cgroup == own || p.ExemptCgroup == own })
		return err
	})
	return used, err
}

// releaseOwnCgroup removes xlane's cgroup if nothing uses it (see above).
func (ap *Control) releaseOwnCgroup() {
	own, err := ownCgroup()
	if err != nil {
		return
	}
	if used, err := ap.ownCgroupUsed(own); err != nil || used {
		return
	}
	removeOwnCgroup(own, ap.c.Log())
}

// RemoveOwnCgroup removes xlane's cgroup unless processes, child cgroups
// or programs are in it (`xlaned --uninstall`, once every record and pin
// is gone).
func RemoveOwnCgroup(log *slog.Logger) {
	if own, err := ownCgroup(); err == nil {
		removeOwnCgroup(own, log)
	}
}

// removeOwnCgroup removes xlane's cgroup at own unless processes, child
// cgroups or programs are in it (--uninstall: every record is gone).
func removeOwnCgroup(own string, log *slog.Logger) {
	if _, err := os.Stat(own); err != nil {
		return
	}
	// A link unpinned or closed a moment ago is released by a kernel
	// worker (bpf_link_put defers it): its program shows until then.
	n := cgroupPrograms(own)
	for deadline := time.Now().Add(detachWait); n > 0 && time.Now().Before(deadline); n = cgroupPrograms(own) {
		time.Sleep(20 * time.Millisecond)
	}
	if n != 0 { // -1: cannot tell, keep it
		log.Warn("xlane's cgroup kept: programs (of another xlaned?) are attached to it", "cgroup", own, "programs", n)
		return
	}
	switch err := unix.Rmdir(own); {
	case err == nil:
		log.Info("removed xlane's cgroup: nothing uses it", "cgroup", own)
	case errors.Is(err, unix.EBUSY):
		log.Warn("xlane's cgroup kept: processes or cgroups are in it (move them out and rmdir it to remove it)", "cgroup", own)
	case !errors.Is(err, unix.ENOENT):
		log.Warn("remove xlane's cgroup", "cgroup", own, "err", err)
	}
}

// cgroupPrograms counts the programs attached to the cgroup at path at the
// attach points xlane uses (-1: it cannot tell).
func cgroupPrograms(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	for _, t := range []ebpf.AttachType{ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect,
		ebpf.AttachCGroupUDP4Sendmsg, ebpf.AttachCGroupUDP6Sendmsg, ebpf.AttachCGroupUDP4Recvmsg,
		ebpf.AttachCGroupUDP6Recvmsg, ebpf.AttachCGroupSockOps, ebpf.AttachCGroupGetsockopt} {
		r, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: t})
		if err != nil {
			return -1
		}
		n += len(r.Programs)
	}
	return n
}
