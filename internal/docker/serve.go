package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/xlane-dev/xlane/internal/api"
)

// DefaultSocket is where Docker discovers the plugin: a socket in
// /run/docker/plugins makes a driver named after the file ("xlane").
const DefaultSocket = "/run/docker/plugins/xlane.sock"

// Serve serves dr on a root-only unix socket at path until the returned
// stop function is called (which removes the socket). An empty path serves
// nothing. When another live xlaned already serves the default path (several
// daemons in separate namespaces on one machine, as the tests and benchmarks
// run them), this one warns and does without; on any other path that is an
// error.
func Serve(path string, dr *Driver, log *slog.Logger) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		if path == DefaultSocket {
			log.Warn("docker plugin socket is served by another xlaned; this one does not serve Docker", "socket", path)
			return func() {}, nil
		}
		return nil, fmt.Errorf("docker plugin socket %s: another xlaned is listening", path)
	}
	if err := dr.Resume(); err != nil {
		return nil, fmt.Errorf("load the Docker driver's state: %w", err)
	}
	l, err := api.ListenUnix(path)
	if err != nil {
		return nil, fmt.Errorf("docker plugin socket: %w", err)
	}
	srv := &http.Server{Handler: dr.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("docker plugin server", "err", err)
		}
	}()
	log.Info("serving the Docker network driver", "socket", path)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
		os.Remove(path)
	}, nil
}
