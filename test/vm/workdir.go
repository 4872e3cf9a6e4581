package vm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A guest's work directory (the writable share: the binary, its run
// script, its output, the console log) is $TMPDIR/xlvm-*, removed when Run
// returns. A process that dies without running its defers (SIGKILL; the
// Go runtime's exit on SIGQUIT, which is how `go test` ends a test binary,
// or a -exec vmexec, that outlives its timeout) leaves it behind: each dir
// holds an owner file, "PID STARTTIME", and every Run first removes the
// dirs whose owner is gone (sweepWorkDirs). The start time (field 22 of
// /proc/PID/stat) tells a live owner from a later process with the same
// pid; a live owner's dir is never touched.

const (
	workDirPrefix = "xlvm-"
	ownerFile     = "owner"
	// ownerlessAge: a dir without an owner file is removed only when it
	// is older than this. Run writes the file right after creating the
	// dir, so a younger one may be a live run between the two steps;
	// an older one is from a version of Run without owner files or from
	// a run killed between the two steps.
	ownerlessAge = 10 * time.Minute
)

// newWorkDir creates a work directory under root ("": $TMPDIR) and writes
// its owner file.
func newWorkDir(root string) (string, error) {
	dir, err := os.MkdirTemp(root, workDirPrefix)
	if err != nil {
		return "", err
	}
	me, err := owner(os.Getpid())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, ownerFile), []byte(me+"\n"), 0o644)
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("guest work dir: %w", err)
	}
	return dir, nil
}

// owner is "PID STARTTIME" of a live process.
func owner(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command (field 2) is in parentheses and may hold spaces and
	// parentheses: fields after it are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields, want 22 or more", pid, len(f)+2)
	}
	return strconv.Itoa(pid) + " " + f[19], nil
}

// ownerAlive says whether the process that an owner file names still runs.
func ownerAlive(content string) (bool, error) {
	f := strings.Fields(content)
	if len(f) != 2 {
		return false, fmt.Errorf("owner %q: want \"PID STARTTIME\"", content)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return false, fmt.Errorf("owner %q: bad pid", content)
	}
	now, err := owner(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return now == f[0]+" "+f[1], nil
}

// inCmdline says whether a running process has path on its command line
// (QEMU names its shares there: -virtfs local,path=DIR,...).
func inCmdline(path string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			for _, part := range bytes.Split(arg, []byte{','}) {
				if string(part) == "path="+path {
					return true
				}
			}
		}
	}
	return false
}

// sweepWorkDirs removes the work dirs under root ("": $TMPDIR) whose owner
// is dead, and owner-less ones older than ownerlessAge that no QEMU serves
// (a work dir of a Run before owner files). It returns what it
// removed; dirs it cannot judge (an unreadable or malformed owner file)
// stay.
func sweepWorkDirs(root string) []string {
	if root == "" {
		root = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(root, workDirPrefix+"*"))
	var removed []string
	for _, d := range dirs {
		st, err := os.Lstat(d)
		if err != nil || !st.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if time.Since(st.ModTime()) < ownerlessAge || inCmdline(d) {
				continue
			}
		case err != nil:
			continue
		default:
			if alive, err := ownerAlive(string(b)); err != nil || alive {
				continue
			}
		}
		if os.RemoveAll(d) == nil {
			removed = append(removed, d)
		}
	}
	return removed
}
