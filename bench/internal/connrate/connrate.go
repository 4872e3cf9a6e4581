// Package connrate is the connection-rate load generator and its
// backends, shared by bench/nat and bench/k8s: each benchmark's binary runs
// them inside network namespaces as subcommands,
//
//	nsenter --net=CLIENT  BENCH <client-subcommand> -targets FILE -duration 5s -conc 4
//	nsenter --net=BACKEND BENCH <server-subcommand> -addr IP -port 20000 -n 10000 [-id 1]
//
// The server writes one byte (-id, '0'+id) to every connection it accepts
// and closes it; the client opens a connection to a random target, reads
// the byte, closes, and counts, from `conc` goroutines, for `duration`, and
// prints one JSON object (Result) on stdout.
package connrate

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Result is what one client run measured.
type Result struct {
	OK       int            `json:"ok"`
	Failed   int            `json:"failed"`
	Errors   map[string]int `json:"errors,omitempty"` // failure kind -> count
	Seconds  float64        `json:"seconds"`
	CPS      float64        `json:"cps"` // successful connections per second
	P50Us    float64        `json:"p50_us"`
	P90Us    float64        `json:"p90_us"`
	P99Us    float64        `json:"p99_us"`
	Targets  int            `json:"targets"`
	Conc     int            `json:"conc"`
	Timeouts int            `json:"timeouts"`
}

// Server listens on addr, ports [port, port+n), and answers every
// connection with one byte. It prints "ready" once every port listens and
// runs until SIGTERM/SIGINT.
func Server(args []string) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	addr := fs.String("addr", "", "address to listen on")
	port := fs.Int("port", 8080, "first port")
	n := fs.Int("n", 1, "number of consecutive ports")
	id := fs.Int("id", 0, "the byte written is '0'+id (which backend answered)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// One descriptor per port: raise the soft limit to the hard one (Go
	// does that too; here to say why it fails).
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Max < uint64(*n)+64 {
		fmt.Fprintf(os.Stderr, "connrate server: %d ports need %d open files; the limit is %d\n", *n, *n+64, rl.Max)
		return 1
	}
	var lns []net.Listener
	for p := *port; p < *port+*n; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(*addr, fmt.Sprint(p)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "connrate server:", err)
			return 1
		}
		lns = append(lns, ln)
	}
	one := []byte{byte('0' + *id)}
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue // e.g. EMFILE: keep serving
				}
				c.Write(one)
				c.Close()
			}
		}()
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	for _, ln := range lns {
		ln.Close()
	}
	return 0
}

// Client is the load generator.
func Client(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	targetsFile := fs.String("targets", "", "file with one IP:PORT per line")
	duration := fs.Duration("duration", 5*time.Second, "how long to run")
	conc := fs.Int("conc", 4, "concurrent connections (goroutines)")
	timeout := fs.Duration("timeout", 2*time.Second, "connect + first byte timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	targets, err := ReadTargets(*targetsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connrate client:", err)
		return 1
	}
	res := Run(targets, *duration, *conc, *timeout)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

func ReadTargets(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no targets", path)
	}
	return out, sc.Err()
}

func Run(targets []string, duration time.Duration, conc int, timeout time.Duration) Result {
	type worker struct {
		ok, failed, timeouts int
		errs                 map[string]int
		lat                  []time.Duration
	}
	ws := make([]worker, conc)
	start := time.Now()
	end := start.Add(duration)
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(w *worker, seed uint64) {
			defer wg.Done()
			w.errs = map[string]int{}
			rng := rand.New(rand.NewPCG(seed, 0x6e6174))
			d := net.Dialer{Timeout: timeout}
			buf := make([]byte, 1)
			for time.Now().Before(end) {
				t0 := time.Now()
				c, err := d.Dial("tcp", targets[rng.IntN(len(targets))])
				if err == nil {
					c.SetReadDeadline(t0.Add(timeout))
					_, err = io.ReadFull(c, buf)
					c.Close()
				}
				if err != nil {
					w.failed++
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						w.timeouts++
					}
					w.errs[ErrKind(err)]++
					continue
				}
				w.ok++
				w.lat = append(w.lat, time.Since(t0))
			}
		}(&ws[i], uint64(i)+uint64(start.UnixNano()))
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := Result{Errors: map[string]int{}, Seconds: elapsed.Seconds(), Targets: len(targets), Conc: conc}
	var lat []time.Duration
	for _, w := range ws {
		res.OK += w.ok
		res.Failed += w.failed
		res.Timeouts += w.timeouts
		for k, v := range w.errs {
			res.Errors[k] += v
		}
		lat = append(lat, w.lat...)
	}
	res.CPS = float64(res.OK) / elapsed.Seconds()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	res.P50Us, res.P90Us, res.P99Us = pct(0.50), pct(0.90), pct(0.99)
	return res
}

// ErrKind names a failure without addresses, for counting.
func ErrKind(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no local port"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "other"
}
