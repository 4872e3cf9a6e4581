package harness

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"
)

// cleanupTimeout bounds every teardown command; teardown does not use the
// run's context, which is cancelled on SIGINT/SIGTERM.
const cleanupTimeout = 30 * time.Second

// UndoStack holds teardown steps; Run executes them last-in first-out,
// keeps going past failures and reports them all.
type UndoStack struct {
	mu    sync.Mutex
	steps []undoStep
}

type undoStep struct {
	what string
	fn   func(ctx context.Context) error
}

func (u *UndoStack) Push(what string, fn func(ctx context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.steps = append(u.steps, undoStep{what, fn})
}

func (u *UndoStack) Run() error {
	u.mu.Lock()
	steps := u.steps
	u.steps = nil
	u.mu.Unlock()
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		if Verbose {
			log.Printf("teardown: %s", steps[i].what)
		}
		if err := steps[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", steps[i].what, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}
