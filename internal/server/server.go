package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/model"
)

// Handler returns the API routes for d.
func Handler(d *daemon.Daemon, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, status int, fn func(*http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			limit := int64(maxBody)
			switch {
			case strings.HasPrefix(r.URL.Path, api.PathFirewall), r.URL.Path == api.PathPolicies:
				limit = maxFirewallBody
			case r.URL.Path == api.PathServicesApply:
				limit = maxServicesBody
			}
			if err := limitBody(w, r, limit); err != nil {
				writeError(w, log, r, err)
				return
			}
			out, err := fn(r)
			if err != nil {
				writeError(w, log, r, err)
				return
			}
			if out == nil {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			writeJSON(w, status, out)
		})
	}
	route("POST "+api.PathNetworks, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.NetworkCreate
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		n, err := d.CreateNetwork(req)
		if err != nil {
			return nil, err
		}
		return d.Network(n.Name)
	})
	route("GET "+api.PathNetworks, http.StatusOK, func(r *http.Request) (any, error) {
		nets, err := d.Networks()
		return orEmpty(nets), err
	})
	route("GET "+api.PathNetworks+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Network(r.PathValue("name"))
	})
	route("PATCH "+api.PathNetworks+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		var req api.NetworkUpdate
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		n, err := d.UpdateNetwork(r.PathValue("name"), req)
		if err != nil {
			return nil, err
		}
		return d.Network(n.Name)
	})
	route("DELETE "+api.PathNetworks+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.DeleteNetwork(r.PathValue("name"), r.URL.Query().Get("force") == "true")
	})
	route("POST "+api.PathEndpoints, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.EndpointAdd
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		e, err := d.AddEndpoint(req)
		if err != nil {
			return nil, err
		}
		return d.Endpoint(e.ID)
	})
	route("GET "+api.PathEndpoints, http.StatusOK, func(r *http.Request) (any, error) {
		eps, err := d.Endpoints(r.URL.Query().Get("network"))
		return orEmpty(eps), err
	})
	route("GET "+api.PathEndpoints+"/{id}", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Endpoint(r.PathValue("id"))
	})
	route("DELETE "+api.PathEndpoints+"/{id}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.RemoveEndpoint(r.PathValue("id"))
	})
	attachmentRoutes(route, d)
	ports := func(withdraw bool) func(r *http.Request) (any, error) {
		return func(r *http.Request) (any, error) {
			var req api.PortsUpdate
			if err := decode(r, &req); err != nil {
				return nil, err
			}
			if _, err := d.PublishPorts(r.PathValue("id"), req, withdraw); err != nil {
				return nil, err
			}
			return d.Endpoint(r.PathValue("id"))
		}
	}
	route("POST "+api.PathEndpoints+"/{id}/ports", http.StatusOK, ports(false))
	route("DELETE "+api.PathEndpoints+"/{id}/ports", http.StatusOK, ports(true))
	route("GET "+api.PathConntrack, http.StatusOK, func(r *http.Request) (any, error) {
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		return d.Observe().Flows(limit)
	})
	route("DELETE "+api.PathConntrack, http.StatusOK, func(r *http.Request) (any, error) {
		n, err := d.Observe().FlushFlows()
		return map[string]int{"deleted": n}, err
	})
	route("GET "+api.PathConntrack+"/stats", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Observe().CTStats()
	})
	route("POST "+api.PathNodes, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.NodeAdd
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		n, err := req.Node()
		if err != nil {
			return nil, err
		}
		return d.Cluster().AddNode(n)
	})
	route("GET "+api.PathNodes, http.StatusOK, func(r *http.Request) (any, error) {
		nodes, err := d.Cluster().Nodes()
		return orEmpty(nodes), err
	})
	route("GET "+api.PathNodes+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Cluster().Node(r.PathValue("name"))
	})
	route("PATCH "+api.PathNodes+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		var req api.NodeUpdate
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		return d.Cluster().SetNodeKey(r.PathValue("name"), req.WGPublicKey)
	})
	route("POST "+api.PathRotateKey, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Cluster().RotateKey()
	})
	route("DELETE "+api.PathNodes+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.Cluster().RemoveNode(r.PathValue("name"))
	})
	route("POST "+api.PathServices, http.StatusCreated, func(r *http.Request) (any, error) {
		var req api.ServiceCreate
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		s, err := req.Service()
		if err != nil {
			return nil, err
		}
		return d.Services().Create(s)
	})
	route("POST "+api.PathServicesApply, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.ServiceApply
		if err := decodeSized(r, &req, maxServicesBody); err != nil {
			return nil, err
		}
		apply, err := req.Apply()
		if err != nil {
			return nil, err
		}
		return d.Services().Apply(apply)
	})
	route("GET "+api.PathServices, http.StatusOK, func(r *http.Request) (any, error) {
		svcs, err := d.Services().List()
		return orEmpty(svcs), err
	})
	route("GET "+api.PathServices+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		return d.Services().Get(r.PathValue("name"))
	})
	route("PATCH "+api.PathServices+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		var req api.ServiceUpdate
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		upd, err := req.Update()
		if err != nil {
			return nil, err
		}
		return d.Services().Update(r.PathValue("name"), upd)
	})
	route("DELETE "+api.PathServices+"/{name}", http.StatusNoContent, func(r *http.Request) (any, error) {
		return nil, d.Services().Delete(r.PathValue("name"))
	})
	route("GET "+api.PathStatus, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Status()
	})
	route("GET "+api.PathBPFMaps, http.StatusOK, func(r *http.Request) (any, error) {
		maps, err := d.Observe().BPFMaps()
		return orEmpty(maps), err
	})
	route("GET "+api.PathBPFMaps+"/{name}", http.StatusOK, func(r *http.Request) (any, error) {
		limit := 0
		if s := r.URL.Query().Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, model.Fieldf("limit", "%q: want a number", s)
			}
			limit = n
		}
		return d.Observe().DumpMap(r.PathValue("name"), limit)
	})
	route("GET "+api.PathCalibration, http.StatusOK, func(r *http.Request) (any, error) {
		return d.Calibrator().Calibration(), nil
	})
	route("POST "+api.PathCalibration, http.StatusOK, func(r *http.Request) (any, error) {
		if _, err := d.Calibrator().Calibrate(r.Context()); err != nil {
			return nil, err
		}
		return d.Calibrator().Calibration(), nil
	})
	firewallRoutes(route, d)
	policyRoutes(route, d)
	mux.HandleFunc("GET "+api.PathMonitor, serveMonitor(d, log))
	route("POST "+api.PathTrace, http.StatusOK, func(r *http.Request) (any, error) {
		var req api.TraceRequest
		if err := decodeLarge(r, &req); err != nil {
			return nil, err
		}
		return d.Observe().Trace(req)
	})
	accelRoutes(route, d)
	proxyRoutes(route, d)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, log, r, model.NotFoundf("%s %s: no such API path", r.Method, r.URL.Path))
	})
	return mux
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeErr(err, maxBody)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Longest message and field of an error reply (bytes): errors echo the
// values they refuse, and a request may carry megabytes of one.
const (
	maxErrMessage = 2048
	maxErrField   = 256
)

func writeError(w http.ResponseWriter, log *slog.Logger, r *http.Request, err error) {
	e := api.Error{Code: api.CodeInternal, Message: model.Clip(err.Error(), maxErrMessage)}
	status := http.StatusInternalServerError
	var fe *model.FieldError
	switch {
	case errors.Is(err, ErrTooLarge):
		e.Code, e.Field, status = api.CodeTooLarge, "body", http.StatusRequestEntityTooLarge
	case errors.As(err, &fe):
		e.Code, e.Field, status = api.CodeInvalid, model.Clip(fe.Field, maxErrField), http.StatusBadRequest
	case errors.Is(err, model.ErrNotFound):
		e.Code, status = api.CodeNotFound, http.StatusNotFound
	case errors.Is(err, model.ErrConflict):
		e.Code, status = api.CodeConflict, http.StatusConflict
	case errors.Is(err, model.ErrUnavailable):
		e.Code, status = api.CodeUnavailable, http.StatusServiceUnavailable
	}
	if status == http.StatusInternalServerError {
		log.Error("request failed", "method", r.Method, "path", model.Clip(r.URL.Path, maxErrField), "err", e.Message)
	}
	writeJSON(w, status, api.ErrorBody{Error: e})
}

// Listen opens the API's root-only unix socket at path (api.ListenUnix).
func Listen(path string) (net.Listener, error) { return api.ListenUnix(path) }
