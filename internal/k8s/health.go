package k8s

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// HealthCheck is what a Service's health-check NodePort answers: a
// LoadBalancer Service with externalTrafficPolicy Local has one
// (spec.healthCheckNodePort), where load balancers ask each node whether
// it has endpoints of the Service.
type HealthCheck struct {
	Port      int32
	Namespace string
	Name      string
	// Local is this node's ready endpoints of the Service (distinct
	// addresses): 200 when there are some, 503 when none.
	Local int
}

// HealthCheckOf returns the health check of a Service, ok false when it
// has none.
func HealthCheckOf(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, self string) (hc HealthCheck, ok bool) {
	if svc.Spec.HealthCheckNodePort == 0 || svc.Spec.Type != corev1.ServiceTypeLoadBalancer ||
		svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return hc, false
	}
	hc = HealthCheck{Port: svc.Spec.HealthCheckNodePort, Namespace: svc.Namespace, Name: svc.Name}
	seen := map[string]bool{}
	for _, s := range eps {
		for _, e := range s.Endpoints {
			if ptrOr(e.NodeName, "") != self || !ptrOr(e.Conditions.Ready, true) || ptrOr(e.Conditions.Terminating, false) {
				continue
			}
			for _, a := range e.Addresses {
				if !seen[a] {
					seen[a] = true
					hc.Local++
				}
			}
		}
	}
	return hc, true
}

// healthServers serves the health-check NodePorts, as kube-proxy does: an
// HTTP server per port on every address of the node (xlaned's network
// namespace), answering any path with the Service, its local endpoints and
// 200, or 503 without local endpoints.
type healthServers struct {
	log   *slog.Logger
	host  string // the address to listen on; "" is every address
	mu    sync.Mutex
	ports map[int32]*healthServer
}

type healthServer struct {
	srv   *http.Server
	state atomic.Pointer[HealthCheck]
}

// sync makes the served ports those of want (by port); a port that cannot
// be opened is reported and tried again at the next sync.
func (h *healthServers) sync(want map[int32]HealthCheck) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ports == nil {
		h.ports = map[int32]*healthServer{}
	}
	for port, s := range h.ports {
		if _, ok := want[port]; !ok {
			s.srv.Close()
			delete(h.ports, port)
		}
	}
	var errs []error
	for port, hc := range want {
		hc := hc
		if s, ok := h.ports[port]; ok {
			s.state.Store(&hc)
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(h.host, strconv.Itoa(int(port))))
		if err != nil {
			errs = append(errs, fmt.Errorf("health-check NodePort %d of %s/%s: %w", port, hc.Namespace, hc.Name, err))
			continue
		}
		s := &healthServer{}
		s.state.Store(&hc)
		s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				h.log.Error("kubernetes: health-check NodePort", "port", port, "err", err)
			}
		}()
		h.ports[port] = s
	}
	return errors.Join(errs...)
}

// close stops every server.
func (h *healthServers) close() {
	h.sync(nil)
}

// ServeHTTP answers as kube-proxy's health-check server does.
func (s *healthServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	hc := s.state.Load()
	body, _ := json.Marshal(map[string]any{
		"service":             map[string]string{"namespace": hc.Namespace, "name": hc.Name},
		"localEndpoints":      hc.Local,
		"serviceProxyHealthy": true,
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(hc.Local))
	if hc.Local == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(body)
}
