// Command vmexec runs a program, typically a Go test binary, on a kernel of
// the matrix inside QEMU. It is made for `go test -exec`:
//
//	CGO_ENABLED=0 go test -exec "bin/vmexec -kernel 6.12" ./internal/bpf
//
// The kernel comes from -kernel or XLANE_VM_KERNEL; "host" runs the program
// here, natively, so one command line serves every leg of the matrix. The
// program runs in its current directory (the package directory, read-only in
// the guest) with the environment's PATH, HOME, TERM, LANG, CI, GO* and
// XLANE_* variables; its exit status is vmexec's. SIGINT, SIGTERM, SIGQUIT
// or SIGHUP stop the guest, remove its work directory ($TMPDIR/xlvm-*) and
// exit 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/xlane-dev/xlane/test/vm"
)

func main() {
	fs := flag.NewFlagSet("vmexec", flag.ExitOnError)
	kernel := fs.String("kernel", os.Getenv("XLANE_VM_KERNEL"), "kernel of the matrix (6.1, 6.12) or host")
	cache := fs.String("cache", vm.DefaultCacheDir(), "cache of kernel packages and images (env XLANE_VM_CACHE)")
	mem := fs.Int("mem", 2048, "guest memory in MiB")
	fetchOnly := fs.Bool("fetch", false, "only fetch and build the kernel image, print its paths")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: vmexec [-kernel 6.1|6.12|host] PROGRAM [ARGS...]")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if *kernel == "" {
		fmt.Fprintln(os.Stderr, "vmexec: no kernel: give -kernel or XLANE_VM_KERNEL")
		os.Exit(2)
	}
	if *kernel == "host" {
		os.Exit(native(fs.Args()))
	}
	k, err := vm.KernelByName(*kernel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		os.Exit(2)
	}
	img, err := vm.Fetch(k, *cache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		os.Exit(1)
	}
	if *fetchOnly {
		fmt.Printf("%s %s %s\n", k.Name, img.Vmlinux, img.Initrd)
		return
	}
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		os.Exit(1)
	}
	// A signal stops the guest (QEMU is killed by pid) and removes its
	// work dir before we exit. SIGQUIT too: it is what `go test` sends a
	// -exec program that outlives the test timeout (then SIGKILL 5 s
	// later), and the Go runtime's own answer, a goroutine dump and exit,
	// would skip that cleanup; the guest's console says more than our
	// goroutines would. A SIGKILLed vmexec's QEMU dies with it
	// (Pdeathsig) and its work dir goes at the next Run (test/vm/workdir.go).
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		cancel(fmt.Errorf("stopped by signal %q", sig))
	}()
	env := guestEnv()
	if os.Getenv("XLANE_REQUIRE_FEATURES") == "" {
		env = append(env, "XLANE_REQUIRE_FEATURES="+strings.Join(k.RequireFeatures, ","))
	}
	if os.Getenv("XLANE_REQUIRE_MODES") == "" {
		env = append(env, "XLANE_REQUIRE_MODES="+strings.Join(k.RequireModes, ","))
	}
	env = append(env, "XLANE_VM_KERNEL="+k.Name)
	rc, err := vm.Run(ctx, img, vm.Cmd{
		Path: fs.Arg(0), Args: fs.Args()[1:], Dir: wd, Env: env,
		Stdout: os.Stdout, Console: os.Stderr, MemMB: *mem,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		os.Exit(1)
	}
	os.Exit(rc)
}

// guestEnv is the part of our environment the guest gets.
func guestEnv() []string {
	env := []string{"HOME=/root"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "XLANE_VM_KERNEL":
		case k == "PATH", k == "TERM", k == "LANG", k == "CI",
			strings.HasPrefix(k, "GO"), strings.HasPrefix(k, "XLANE_"):
			env = append(env, kv)
		}
	}
	return env
}

func native(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "vmexec: no program")
		return 2
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "vmexec:", err)
		return 1
	}
	return 0
}
