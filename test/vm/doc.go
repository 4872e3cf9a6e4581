// Package vm runs Go test binaries inside QEMU on other kernels: the
// project's kernel matrix.
//
// A kernel is a Debian linux-image package pinned by exact version and
// SHA-256 (Kernels). Fetch downloads it with apt-get into a cache directory,
// checks the hash, extracts the uncompressed vmlinux (booted directly
// through its PVH entry, seconds faster than the bzImage) and builds a small
// initramfs: static busybox, the few modules the tests need, and an init
// that mounts the host's root read-only over virtio-9p, chroots into it so
// the host's tools (ip, nsenter, ping, bpftool) work, runs one command and
// powers off.
//
// Run boots one such guest for one command and returns its exit status; the
// vmexec command wraps it for `go test -exec`. QEMU runs in TCG (no KVM
// here): CPU-bound code is 6-20x slower than on the host, boot is ~4 s.
//
// The guest sees the host tree read-only, with fresh tmpfs on /tmp, /run
// and /var/tmp; the test binary and its output travel through a second,
// writable 9p share. The guest has no NIC unless Cmd.QEMUArgs gives it one
// (a tap in Cmd.Netns: the VM endpoint test, test/e2e/vm_test.go).
package vm
