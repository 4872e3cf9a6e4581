// Links and pins shared by socket acceleration (accel.go) and proxy
// redirects (proxy.go).

package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The socket layer (bpf/sock_accel.c, bpf/sock_proxy.c) keeps its pins
// apart, under pinDir/sock: maps in sock/maps, cgroup links as
// sock/accel_sockops and sock/proxy_<cgroup id>_<hook>. Links are pinned,
// so acceleration and redirects outlive the daemon (kill -9 included);
// RemovePins (uninstall) removes them with everything else. sockDir is a path under
// pinDir/sock.
func (d *BPF) sockDir(parts ...string) string {
	return filepath.Join(append([]string{d.pinDir, "sock"}, parts...)...)
}

// CgroupID is the id of the cgroup2 directory at path (its inode number).
func CgroupID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", path, err)
	}
	return st.Ino, nil
}

// attachCgroupPinned attaches prog to the cgroup at path as pin, adopting
// a pinned link to the same cgroup (its program replaced) and replacing
// one to another cgroup. The old link goes only once the new one is in.
func attachCgroupPinned(pin, path string, at ebpf.AttachType, prog *ebpf.Program) error {
	id, err := CgroupID(path)
	if err != nil {
		return err
	}
	var old link.Link
	if l, err := link.LoadPinnedLink(pin, nil); err == nil {
		info, ierr := l.Info()
		if ierr == nil && info.Cgroup() != nil && info.Cgroup().CgroupId == id {
			err := l.Update(prog)
			l.Close()
			if err == nil {
				return nil
			}
		}
		old = l
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: path, Attach: at, Program: prog})
	if err != nil {
		if old != nil {
			old.Close()
		}
		return fmt.Errorf("attach %s to cgroup %s: %w", filepath.Base(pin), path, err)
	}
	if old != nil {
		old.Unpin()
		old.Close()
	}
	if err := os.MkdirAll(filepath.Dir(pin), 0o700); err != nil {
		l.Close()
		return err
	}
	err = l.Pin(pin)
	l.Close()
	if err != nil {
		return fmt.Errorf("pin %s: %w", pin, err)
	}
	return nil
}

// unpinLink removes a pinned link (detaching it); missing is fine.
func unpinLink(pin string) error {
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		// Not a link we can load: the pin alone goes.
		if rerr := os.Remove(pin); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", pin, rerr)
		}
		return nil
	}
	defer l.Close()
	return l.Unpin()
}

// sockUnused: the socket layer's maps were never created here (nothing
// to report, and reading must not create them).
func (d *BPF) sockUnused(m string, loaded bool) bool {
	if loaded {
		return false
	}
	_, err := os.Stat(d.sockDir("maps", m))
	return errors.Is(err, os.ErrNotExist)
}
