package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlane-dev/xlane/internal/accel"
)

// Helper processes: the test binary re-executed (XLANE_E2E_HELPER=mode,
// XLANE_E2E_ARG=JSON) inside a cgroup, so that the cgroup's programs see
// its sockets. maybeHelper runs first in TestMain.
const helperEnv, helperArg = "XLANE_E2E_HELPER", "XLANE_E2E_ARG"

func maybeHelper() {
	mode, ok := os.LookupEnv(helperEnv)
	if !ok {
		return
	}
	run, ok := map[string]func(arg string) error{
		"cases":    jsonArg(helperCases),
		"proxy":    jsonArg(helperProxy),
		"http":     jsonArg(helperHTTP),
		"httpsrv":  jsonArg(helperHTTPServer),
		"httpget":  jsonArg(helperHTTPGet),
		"relay":    jsonArg(helperRelay),
		"chain":    jsonArg(helperChain),
		"iocopy":   jsonArg(helperIOCopy),
		"download": jsonArg(helperDownload),
	}[mode]
	err := fmt.Errorf("unknown helper %q", mode)
	if ok {
		err = run(os.Getenv(helperArg))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// jsonArg decodes a helper's JSON argument (XLANE_E2E_ARG) into its type
// and runs it.
func jsonArg[T any](f func(T) error) func(arg string) error {
	return func(arg string) error {
		var a T
		if err := json.Unmarshal([]byte(arg), &a); err != nil {
			return fmt.Errorf("argument %s: %w", arg, err)
		}
		return f(a)
	}
}

// helper starts the test binary as helper mode in the cgroup at cg (and
// the network namespace netns, if set).
func helper(t *testing.T, cg, netns, mode string, arg any) *exec.Cmd {
	t.Helper()
	raw, _ := json.Marshal(arg)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	if netns != "" {
		cmd = inNS(netns, exe)
	} else {
		cmd = exec.Command(exe)
	}
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperArg+"="+string(raw))
	fd, err := unix.Open(cg, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
	return cmd
}

type casesArg struct {
	Names []string `json:"names"`
	Large int      `json:"large"`
}

func helperCases(a casesArg) error {
	lo, err := net.InterfaceByName("lo")
	if err == nil && lo.Flags&net.FlagUp == 0 {
		err = exec.Command("ip", "link", "set", "lo", "up").Run()
	}
	if err != nil {
		return err
	}
	res, err := accel.RunCases(a.Names, a.Large, 20*time.Second)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// proxyArg: a small HTTP proxy for transparent redirects. It listens on
// 127.0.0.1:Port and [::1]:Port, learns each connection's original
// destination with SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST, connects there
// (with SO_MARK Mark when set) and forwards the request with an
// X-Xlane-Proxy header naming the original destination. With UID, it runs
// as that uid (and gid) once it listens, as a proxy started as root and
// dropping privileges does.
type proxyArg struct {
	Port int    `json:"port"`
	Mark uint32 `json:"mark"`
	UID  int    `json:"uid"`
	// PlainTCP: listen with TCP, not Go's default MPTCP (an inbound
	// redirect's socket map holds TCP sockets only).
	PlainTCP bool `json:"plain_tcp"`
}

func helperProxy(a proxyArg) error {
	var ls []net.Listener
	var lc net.ListenConfig
	if a.PlainTCP {
		lc.SetMultipathTCP(false)
	}
	for _, addr := range []string{"127.0.0.1", "::1"} {
		l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort(addr, strconv.Itoa(a.Port)))
		if err != nil {
			return err
		}
		ls = append(ls, l)
	}
	if a.UID != 0 {
		// Go sets the ids of every thread (Linux, Go >= 1.16).
		if err := syscall.Setgid(a.UID); err != nil {
			return fmt.Errorf("setgid %d: %w", a.UID, err)
		}
		if err := syscall.Setuid(a.UID); err != nil {
			return fmt.Errorf("setuid %d: %w", a.UID, err)
		}
	}
	fmt.Println("ready")
	errc := make(chan error, len(ls))
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					errc <- err
					return
				}
				go proxyConn(c.(*net.TCPConn), a.Mark)
			}
		}()
	}
	return <-errc
}

func proxyConn(c *net.TCPConn, mark uint32) {
	defer c.Close()
	dst, err := accel.OriginalDst(c)
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nX-Proxy-Error: %s\r\n\r\n", strings.ReplaceAll(err.Error(), " ", "_"))
		return
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if mark != 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)) })
			return serr
		}
	}
	up, err := d.Dial("tcp", dst.String())
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	req.Header.Set("X-Xlane-Proxy", dst.String())
	req.Header.Set("Connection", "close")
	if err := req.Write(up); err != nil {
		return
	}
	// A plain read/write loop: io.Copy between two TCP connections would
	// splice, which sockmap breaks on most kernels (docs/accel.md), and
	// the test runs this proxy with acceleration on too.
	io.Copy(onlyWriter{c}, onlyReader{up})
}

type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// httpArg: serve on Port (127.0.0.1 and ::1), then fetch each path from
// both addresses on the same port (which the test redirects to the proxy)
// and check the body by SHA-256 and that the proxy carried the request.
type httpArg struct {
	Port  int      `json:"port"`
	Paths []string `json:"paths"`
}

func helperHTTP(a httpArg) error {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		body := accelPayload(n)
		sum := sha256.Sum256(body)
		w.Header().Set("X-Sha256", hex.EncodeToString(sum[:]))
		w.Header().Set("X-Seen-Proxy", r.Header.Get("X-Xlane-Proxy"))
		w.Write(body)
	})}
	for _, addr := range []string{"127.0.0.1", "::1"} {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(a.Port)))
		if err != nil {
			return err
		}
		go srv.Serve(l)
	}
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var errs []error
	for _, addr := range []string{"127.0.0.1", "::1"} {
		for _, p := range a.Paths {
			hp := net.JoinHostPort(addr, strconv.Itoa(a.Port))
			resp, err := cl.Get("http://" + hp + "/" + p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			sum := sha256.Sum256(body)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s/%s: %w", hp, p, err))
			case resp.StatusCode != 200:
				errs = append(errs, fmt.Errorf("%s/%s: %s %s", hp, p, resp.Status, resp.Header.Get("X-Proxy-Error")))
			case hex.EncodeToString(sum[:]) != resp.Header.Get("X-Sha256"):
				errs = append(errs, fmt.Errorf("%s/%s: body of %d bytes fails its SHA-256", hp, p, len(body)))
			case resp.Header.Get("X-Seen-Proxy") != hp:
				errs = append(errs, fmt.Errorf("%s/%s: the server saw X-Xlane-Proxy %q, want %q (not through the proxy, or a wrong original destination)", hp, p, resp.Header.Get("X-Seen-Proxy"), hp))
			}
		}
	}
	return errors.Join(errs...)
}

// accelPayload is n deterministic bytes.
func accelPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// httpSrvArg: an HTTP server on Port (every address, both families) that
// answers POST /N with N bytes of payload, the SHA-256 of the request's
// body (X-Req-Sha256) and of its answer (X-Sha256), and the proxy's
// X-Xlane-Proxy header as it came (X-Seen-Proxy).
type httpSrvArg struct {
	Port int `json:"port"`
}

func helperHTTPServer(a httpSrvArg) error {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(a.Port))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		io.Copy(h, r.Body)
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		body := accelPayload(n)
		sum := sha256.Sum256(body)
		w.Header().Set("X-Req-Sha256", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Sha256", hex.EncodeToString(sum[:]))
		w.Header().Set("X-Seen-Proxy", r.Header.Get("X-Xlane-Proxy"))
		w.Write(body)
	}))
}

// httpGetArg: POST Up bytes to each of Targets (host:port) and read Down
// bytes back, checking both bodies by SHA-256 and that the request went
// through the proxy with the right original destination (Direct: that it
// did not).
type httpGetArg struct {
	Targets []string `json:"targets"`
	Up      int      `json:"up"`
	Down    int      `json:"down"`
	Direct  bool     `json:"direct"`
}

func helperHTTPGet(a httpGetArg) error {
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var errs []error
	for _, hp := range a.Targets {
		up := accelPayload(a.Up)
		upSum := sha256.Sum256(up)
		resp, err := cl.Post("http://"+hp+"/"+strconv.Itoa(a.Down), "application/octet-stream", bytes.NewReader(up))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256(body)
		want := hp
		if a.Direct {
			want = ""
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", hp, err))
		case resp.StatusCode != 200:
			errs = append(errs, fmt.Errorf("%s: %s %s", hp, resp.Status, resp.Header.Get("X-Proxy-Error")))
		case resp.Header.Get("X-Req-Sha256") != hex.EncodeToString(upSum[:]):
			errs = append(errs, fmt.Errorf("%s: the server got a request body failing its SHA-256", hp))
		case len(body) != a.Down || hex.EncodeToString(sum[:]) != resp.Header.Get("X-Sha256"):
			errs = append(errs, fmt.Errorf("%s: answer of %d bytes fails its SHA-256", hp, len(body)))
		case resp.Header.Get("X-Seen-Proxy") != want:
			errs = append(errs, fmt.Errorf("%s: the server saw X-Xlane-Proxy %q, want %q", hp, resp.Header.Get("X-Seen-Proxy"), want))
		}
	}
	return errors.Join(errs...)
}
