package server

import (
	"net/http"
	"strconv"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/model"
)

// proxyRoutes: transparent proxy redirect.
func proxyRoutes(route func(string, int, func(*http.Request) (any, error)), d *daemon.Daemon) {
	route("POST "+api.PathProxy, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.ProxyRedirect
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		return d.Sockets().AddProxyRedirect(req)
	})
	route("GET "+api.PathProxy, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Sockets().ProxyRedirects()
	})
	route("DELETE "+api.PathProxy+"/{port}", http.StatusNoContent, func(r *http.Request) (any, error) {
		p, err := strconv.ParseUint(r.PathValue("port"), 10, 16)
		if err != nil || p == 0 {
			return nil, model.Fieldf("port", "%q: not a TCP port", r.PathValue("port"))
		}
		return nil, d.Sockets().DeleteProxyRedirect(uint16(p), r.URL.Query().Get("key"))
	})
}
