package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
	"github.com/xlane-dev/xlane/bench/internal/measure"
)

// The "proxies" topology: wrk through nginx (reverse proxy, proxy_buffering
// on, upstream keepalive) and through haproxy (HTTP mode, server
// connection reuse) to an origin answering every GET with originBody
// bytes; all on loopback in one namespace, in the variant's cgroup. Its rows
// run only where the self-test passes with no case ignored: nginx reads
// edge-triggered (the epollet case) and haproxy may splice (the splice
// case), so a kernel failing either would measure a proxy that can stall
// or lose data (docs/accel.md).
const (
	originBody                         = 16 << 10
	originPort, nginxPort, haproxyPort = 8170, 8180, 8190 // + variant index
	wrkThreads, wrkConns               = "2", "32"
)

// originMain: origin PORT: answer every request on 127.0.0.1:PORT with
// originBody bytes.
func originMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: origin PORT")
		return 2
	}
	l, err := net.Listen("tcp4", "127.0.0.1:"+args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "origin:", err)
		return 1
	}
	body := make([]byte, originBody)
	for i := range body {
		body[i] = byte(i)
	}
	fmt.Fprintln(os.Stderr, "origin:", http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})))
	return 1
}

// startProxies starts, for each variant in its cgroup and in netns ns,
// the origin, nginx and haproxy, and waits until they listen.
func startProxies(ctx context.Context, undo *harness.UndoStack, tmp, self, ns string, variants []variant) error {
	for _, v := range variants {
		dir := filepath.Join(tmp, "proxies-"+v.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		o, ng, hp := originPort+v.idx, nginxPort+v.idx, haproxyPort+v.idx
		files := map[string]string{
			"nginx.conf": fmt.Sprintf(`daemon off;
user root root;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 1024; }
http {
	access_log off;
	client_body_temp_path %[1]s/ng-body;
	proxy_temp_path %[1]s/ng-proxy;
	fastcgi_temp_path %[1]s/ng-fastcgi;
	uwsgi_temp_path %[1]s/ng-uwsgi;
	scgi_temp_path %[1]s/ng-scgi;
	upstream origin { server 127.0.0.1:%[3]d; keepalive 32; }
	server {
		listen 127.0.0.1:%[2]d;
		location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering on; }
	}
}
`, dir, ng, o),
			"haproxy.cfg": fmt.Sprintf(`global
	pidfile %[1]s/haproxy.pid
	maxconn 1024
defaults
	mode http
	http-reuse always
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend fe
	bind 127.0.0.1:%[2]d
	default_backend origin
backend origin
	server o 127.0.0.1:%[3]d
`, dir, hp, o),
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				return err
			}
		}
		for _, argv := range [][]string{
			{self, "origin", strconv.Itoa(o)},
			{"nginx", "-c", filepath.Join(dir, "nginx.conf"), "-p", dir},
			{"haproxy", "-db", "-f", filepath.Join(dir, "haproxy.cfg")},
		} {
			if err := startIn(ctx, undo, tmp, self, v.cg, ns, argv...); err != nil {
				return err
			}
		}
		for _, p := range []int{o, ng, hp} {
			ap := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p))
			if err := harness.WaitFor(ctx, ap.String(), 10*time.Second, nil, func() bool { return harness.Listening(ctx, ns, ap) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// wrkRPS runs wrk for dur seconds against port in the variant's cgroup
// and returns requests/s; non-2xx answers or socket errors are an error.
func wrkRPS(ctx context.Context, self, cg, ns string, port int, dur string) (float64, error) {
	out, err := harness.Run(ctx, cgArgv(self, cg, ns, "wrk", "-t", wrkThreads, "-c", wrkConns, "-d", dur+"s",
		fmt.Sprintf("http://127.0.0.1:%d/", port))...)
	if err != nil {
		return 0, err
	}
	var rps float64
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "Requests/sec:"); ok {
			rps = measure.ParseFloat(strings.TrimSpace(v))
		}
		if strings.HasPrefix(l, "Socket errors:") || strings.HasPrefix(l, "Non-2xx") {
			return 0, fmt.Errorf("wrk: %s", l)
		}
	}
	if rps == 0 {
		return 0, fmt.Errorf("wrk: no Requests/sec in %q", out)
	}
	return rps, nil
}
