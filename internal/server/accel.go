package server

import (
	"net/http"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
)

// accelRoutes: socket acceleration.
func accelRoutes(route func(string, int, func(*http.Request) (any, error)), d *daemon.Daemon) {
	route("POST "+api.PathAccel, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.AccelEnable
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		return d.Sockets().EnableAccel(req)
	})
	route("DELETE "+api.PathAccel, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Sockets().DisableAccel()
	})
	route("GET "+api.PathAccel, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Sockets().AccelStatus()
	})
}
