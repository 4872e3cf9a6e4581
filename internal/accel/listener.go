package accel

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// A Listener is a TCP socket listening on a port of a network namespace,
// as a process holds it, with a copy of it for this process (taken with
// pidfd_getfd, Linux 5.6+) that the caller puts into the inbound
// redirect's socket map and closes.
type Listener struct {
	Pid    int
	Fd     int    // the socket's fd in Pid
	Family uint8  // 4 (tcp) or 6 (tcp6: [::], also IPv4 unless v6only)
	Cgroup string // Pid's cgroup2 path under the mount ("/a/b")
	MPTCP  bool   // an MPTCP socket (Go 1.24+ listens with MPTCP by default)
	File   *os.File
}

// ErrNoListener: nothing listens on the port in the namespace.
var ErrNoListener = errors.New("no listening socket")

// NetnsInode is the inode of a network namespace file (/proc/PID/ns/net,
// a bind mount under /run/netns): two files name the same namespace when
// their inodes are equal.
func NetnsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// FindListeners finds the TCP sockets listening on port in the network
// namespace at netnsPath, and copies each from a process that holds it
// (any process: one may have made it there and moved on). A socket shared
// by several processes (a forked server) is taken once. ErrNoListener
// when there is none.
func FindListeners(netnsPath string, port uint16) ([]Listener, error) {
	var inodes map[uint64]uint8 // socket inode -> family
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) (err error) {
		inodes, err = listeningInodes("/proc/thread-self", port)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", netnsPath, err)
	}
	if len(inodes) == 0 {
		return nil, ErrNoListener
	}
	pids, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Listener
	for _, e := range pids {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ls, err := holders(pid, inodes)
		if err != nil {
			closeListeners(out)
			return nil, err
		}
		out = append(out, ls...)
		if len(inodes) == 0 {
			break
		}
	}
	if len(out) == 0 {
		return nil, ErrNoListener
	}
	return out, nil
}

// Listening says whether a TCP socket listens on port in this process's
// network namespace, from /proc/self/net/tcp{,6}: without connecting to it
// (a proxy in intercept mode asks SO_ORIGINAL_DST of every connection it
// accepts, and a probe that was not redirected has none: squid 5.7 stops
// accepting on the port after that one ENOENT).
func Listening(port uint16) bool {
	in, err := listeningInodes("/proc/self", port)
	return err == nil && len(in) > 0
}

func closeListeners(ls []Listener) {
	for _, l := range ls {
		l.File.Close()
	}
}

// listeningInodes reads TASK/net/tcp{,6}: the inodes of the sockets in
// state LISTEN (0A) on port.
func listeningInodes(task string, port uint16) (map[uint64]uint8, error) {
	out := map[uint64]uint8{}
	for fam, name := range map[uint8]string{4: "tcp", 6: "tcp6"} {
		f, err := os.Open(task + "/net/" + name)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fl[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if !ok || err != nil || uint16(p) != port {
				continue
			}
			if in, err := strconv.ParseUint(fl[9], 10, 64); err == nil && in != 0 {
				out[in] = fam
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holders copies the sockets of inodes that pid holds, removing them
// from inodes.
func holders(pid int, inodes map[uint64]uint8) ([]Listener, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil // gone, or a kernel thread
	}
	var out []Listener
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		s, ok := strings.CutPrefix(target, "socket:[")
		if !ok {
			continue
		}
		in, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
		if err != nil {
			continue
		}
		fam, ok := inodes[in]
		if !ok {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		f, err := getfd(pid, fd)
		if err != nil {
			closeListeners(out)
			return nil, fmt.Errorf("take the listening socket (fd %d) of pid %d: %w", fd, pid, err)
		}
		delete(inodes, in)
		proto, _ := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_PROTOCOL)
		out = append(out, Listener{Pid: pid, Fd: fd, Family: fam, Cgroup: ProcCgroup(pid),
			MPTCP: proto == unix.IPPROTO_MPTCP, File: f})
	}
	return out, nil
}

// getfd copies fd of pid into this process.
func getfd(pid, fd int) (*os.File, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pfd)
	nfd, err := unix.PidfdGetfd(pfd, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_getfd: %w", err)
	}
	return os.NewFile(uintptr(nfd), "listener"), nil
}

// ProcCgroup is pid's cgroup2 path ("0::/a/b" in /proc/PID/cgroup), ""
// if unknown.
func ProcCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// InCgroup says whether a process's cgroup (as Listener.Cgroup) is the
// cgroup2 directory dir or below it.
func InCgroup(procCg, dir string) bool {
	root, err := Cgroup2Root()
	if err != nil || procCg == "" {
		return false
	}
	p := filepath.Join(root, procCg)
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
