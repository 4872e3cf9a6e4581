package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/model"
)

// The client's error mapping, for plain requests and the monitor stream
// alike: a daemon error body becomes a *RemoteError unwrapping to the
// model's sentinel and field; a body that is not one, an internal error
// with the HTTP status; no daemon, ErrUnreachable naming the socket.
func TestClientErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "xlane.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == PathNetworks+"/garbled" {
			http.Error(w, "not json", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"code":"` + CodeNotFound + `","field":"name","message":"no such thing"}}`))
	})}
	go srv.Serve(l)
	defer srv.Close()
	c := NewClient(sock)
	ctx := context.Background()

	_, err = c.Network(ctx, "x")
	var re *RemoteError
	var fe *model.FieldError
	if !errors.As(err, &re) || re.Status != http.StatusNotFound || err.Error() != "no such thing" ||
		!errors.Is(err, model.ErrNotFound) || !errors.As(err, &fe) || fe.Field != "name" {
		t.Errorf("404 with an error body: %#v, want a RemoteError: not found, field name, \"no such thing\"", err)
	}
	err = c.Monitor(ctx, MonitorQuery{}, func(MonitorEvent) error { return nil })
	if !errors.As(err, &re) || !errors.Is(err, model.ErrNotFound) {
		t.Errorf("monitor, 404 with an error body: %#v, want a RemoteError: not found", err)
	}
	_, err = c.Network(ctx, "garbled")
	if !errors.As(err, &re) || re.Status != http.StatusBadGateway || re.Error_.Code != CodeInternal || !strings.Contains(err.Error(), "502") {
		t.Errorf("502 without an error body: %#v, want an internal RemoteError naming the status", err)
	}

	gone := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := gone.Networks(ctx); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("no daemon: %v, want ErrUnreachable naming the socket", err)
	}
	if err := gone.Monitor(ctx, MonitorQuery{}, func(MonitorEvent) error { return nil }); !errors.Is(err, ErrUnreachable) {
		t.Errorf("monitor, no daemon: %v, want ErrUnreachable", err)
	}
}
