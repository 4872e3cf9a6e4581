package main

import (
	"os/exec"
	"unsafe"

	"golang.org/x/sys/unix"
)

func execLookPath(name string) (string, error) { return exec.LookPath(name) }

func getsockopt(fd, level, name int, b []byte, l *uint32) error {
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(l)), 0)
	if e != 0 {
		return e
	}
	return nil
}
