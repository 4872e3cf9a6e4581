package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// contentType is the plugin protocol's media type (Docker sends and
// accepts it; plain application/json works too).
const contentType = "application/vnd.docker.plugins.v1.2+json"

// maxBody bounds request bodies.
const maxBody = 1 << 20

// Handler returns the plugin's routes: one per protocol method, each a
// decode → call → encode with an early return on every failure. Unknown
// methods answer 404, which Docker reads as "not implemented".
func (dr *Driver) Handler() http.Handler {
	mux := http.NewServeMux()
	route(mux, dr.log, "Plugin.Activate", func(*empty) (*activateResponse, error) {
		return &activateResponse{Implements: []string{"NetworkDriver"}}, nil
	})
	route(mux, dr.log, "NetworkDriver.GetCapabilities", func(*empty) (*capabilitiesResponse, error) {
		return &capabilitiesResponse{Scope: "local", ConnectivityScope: "local"}, nil
	})
	route(mux, dr.log, "NetworkDriver.CreateNetwork", dr.createNetwork)
	route(mux, dr.log, "NetworkDriver.DeleteNetwork", dr.deleteNetwork)
	route(mux, dr.log, "NetworkDriver.CreateEndpoint", dr.createEndpoint)
	route(mux, dr.log, "NetworkDriver.EndpointOperInfo", dr.endpointOperInfo)
	route(mux, dr.log, "NetworkDriver.DeleteEndpoint", dr.deleteEndpoint)
	route(mux, dr.log, "NetworkDriver.Join", dr.join)
	route(mux, dr.log, "NetworkDriver.Leave", dr.leave)
	route(mux, dr.log, "NetworkDriver.ProgramExternalConnectivity", dr.programExternalConnectivity)
	route(mux, dr.log, "NetworkDriver.RevokeExternalConnectivity", dr.revokeExternalConnectivity)
	route(mux, dr.log, "NetworkDriver.DiscoverNew", accept[discoveryNotification])
	route(mux, dr.log, "NetworkDriver.DiscoverDelete", accept[discoveryNotification])
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		dr.log.Debug("docker: unknown method", "path", r.URL.Path)
		write(w, http.StatusNotFound, errorResponse{Err: fmt.Sprintf("xlane: %s %s: no such method", r.Method, r.URL.Path)})
	})
	return mux
}

// accept answers a notification xlane has nothing to do for.
func accept[Req any](*Req) (*empty, error) { return &empty{}, nil }

// route registers POST /<method>. A request that does not decode gets 400;
// a request that decodes but fails gets 200 with {"Err": "..."}, as
// libnetwork's remote driver protocol asks; Docker shows that sentence to
// the user.
func route[Req, Resp any](mux *http.ServeMux, log *slog.Logger, method string, fn func(*Req) (*Resp, error)) {
	mux.HandleFunc("POST /"+method, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req Req
		if err := decode(r.Body, &req); err != nil {
			log.Warn("docker: bad request", "method", method, "err", err)
			write(w, http.StatusBadRequest, errorResponse{Err: fmt.Sprintf("xlane: %s: %v", method, err)})
			return
		}
		resp, err := fn(&req)
		if err != nil {
			log.Warn("docker: request failed", "method", method, "err", err)
			write(w, http.StatusOK, errorResponse{Err: "xlane: " + err.Error()})
			return
		}
		log.Debug("docker: request", "method", method, "took", time.Since(start))
		write(w, http.StatusOK, resp)
	})
}

// decode reads one JSON value into v. Docker sends "null" or nothing for
// methods without arguments; unknown fields are accepted (newer Docker
// versions add some).
func decode(body io.Reader, v any) error {
	err := json.NewDecoder(io.LimitReader(body, maxBody)).Decode(v)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("body is not the JSON this method takes: %w", err)
	}
	return nil
}

func write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
