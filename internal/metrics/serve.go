package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xlane-dev/xlane/internal/version"
)

// Registry holds every metric xlaned exports: the datapath collector, the
// API latency histogram, the build info and the Go runtime and process
// collectors.
type Registry struct {
	reg *prometheus.Registry
	api *prometheus.HistogramVec
}

// New registers the collectors; src is read at every scrape.
func New(src Source, build version.Info, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	api := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: APIRequestDuration.Name, Help: APIRequestDuration.Help,
		// 100 µs (a status read) to 10 s (a rule set of thousands of rules).
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}, APIRequestDuration.Labels)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: BuildInfo.Name, Help: BuildInfo.Help}, BuildInfo.Labels)
	info.WithLabelValues(build.Version, build.Commit, build.Date, build.GoVersion).Set(1)
	reg.MustRegister(newCollector(src, log), api, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Registry{reg: reg, api: api}
}

// Handler serves the metrics in Prometheus' text (or OpenMetrics) format.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer is the registry, for tests.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Instrument times every API request by its route pattern (net/http's
// ServeMux sets it while routing; unmatched paths are "unmatched"), so the
// latency series are as many as the routes.
func (r *Registry) Instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, req)
		route := req.Pattern
		if route == "" || route == "/" {
			route = "unmatched"
		}
		r.api.WithLabelValues(req.Method, route, strconv.Itoa(sw.status)).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Flush passes a streaming handler's flushes on (xlane monitor's events):
// without it the wrapped writer is no http.Flusher and a stream sat in
// the server's buffer until it filled.
func (w *statusWriter) Flush() {
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ErrNotLoopback: a TCP --metrics-addr that is not a loopback address,
// without --metrics-allow-remote.
var ErrNotLoopback = errors.New("not a loopback address")

// AllowRemoteFlag is the xlaned flag that lets --metrics-addr listen
// beyond loopback.
const AllowRemoteFlag = "--metrics-allow-remote"

// Listen opens addr: "unix:/PATH" (a socket only root may use, replacing
// a stale one), or HOST:PORT with a loopback HOST (127.0.0.1, [::1],
// localhost) unless allowRemote. The metrics name endpoints and count
// their traffic, and the endpoint has no authentication: exposing it
// beyond the node is a decision, made with --metrics-allow-remote.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" || !filepath.IsAbs(path) {
			return nil, fmt.Errorf("--metrics-addr %q: want unix:/ABSOLUTE/PATH", addr)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("--metrics-addr %q: another process is listening there", addr)
		}
		os.Remove(path)
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
		}
		return l, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: want HOST:PORT or unix:/PATH: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: port %q: want 0-65535", addr, port)
	}
	if !allowRemote && !isLoopback(host) {
		what := fmt.Sprintf("host %q", host)
		if host == "" {
			what = "no host (every address)"
		}
		return nil, fmt.Errorf("--metrics-addr %q: %s is %w; the metrics name endpoints and count their traffic and have no authentication: use 127.0.0.1:%s, [::1]:%s or unix:/PATH, or pass %s to serve them beyond this node",
			addr, what, ErrNotLoopback, port, port, AllowRemoteFlag)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	return l, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}
