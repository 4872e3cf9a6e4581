package harness

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
)

// Main runs one benchmark the way every benchmark under bench/
// does: the first SIGINT/SIGTERM/SIGHUP cancels the run and teardown still
// runs (later signals are swallowed so it can finish); a temp dir, kept
// with keepTmp; the cleanup stack run on the way out, whose failure fails
// the run; and a line saying how it failed. Exit code: 0, or 1.
func Main(name string, keepTmp bool, run func(ctx context.Context, tmp string, cleanup *UndoStack) error) (code int) {
	ctx, stop := CancelOnSignal()
	defer stop()
	var cleanup UndoStack
	defer func() {
		if err := cleanup.Run(); err != nil {
			log.Printf("cleanup: %v", err)
			code = 1
		}
	}()
	tmp, err := os.MkdirTemp("", "xlane-bench-"+name)
	if err != nil {
		log.Print(err)
		return 1
	}
	cleanup.Push("remove "+tmp, func(context.Context) error {
		if keepTmp {
			log.Printf("kept %s", tmp)
			return nil
		}
		return os.RemoveAll(tmp)
	})
	if err := run(ctx, tmp, &cleanup); err != nil {
		if ctx.Err() != nil {
			log.Printf("interrupted: %v", err)
		} else {
			log.Printf("FAILED: %v (rerun with -keep-tmp -v for daemon and server logs)", err)
		}
		return 1
	}
	return 0
}

// CancelOnSignal returns a context that SIGINT, SIGTERM and SIGHUP cancel,
// each logged; the signals stay caught until stop, so a second ^C does not
// kill the process halfway through its teardown.
func CancelOnSignal() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for s := range sigs {
			log.Printf("%v: stopping, cleaning up (please wait)", s)
			cancel()
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}
