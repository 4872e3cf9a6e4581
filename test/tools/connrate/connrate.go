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
	"sync/atomic"
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
	// Examples: failure kind -> the first such error and when it came.
	Examples map[string]string `json:"examples,omitempty"`
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
	for _, ln := range lns {
		go Serve(ln, byte('0'+*id))
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

// Serve answers every connection ln accepts with the byte b and closes
// it (the server closes first), until ln is closed.
func Serve(ln net.Listener, b byte) {
	one := []byte{b}
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

// Run is RunConfig of targets for duration with conc workers, each
// connection given timeout for connect and first byte.
func Run(targets []string, duration time.Duration, conc int, timeout time.Duration) Result {
	return RunConfig(Config{Targets: targets, Duration: duration, Conc: conc, Timeout: timeout})
}

// Config is one run of the load generator.
type Config struct {
	Targets  []string
	Duration time.Duration // how long to run
	// Count, if not 0, ends the run once this many connections were
	// tried (ok or failed), before Duration if it comes first.
	Count   int
	Conc    int
	Timeout time.Duration // connect + first byte
	// Worker, if not nil, runs each worker's loop (work), e.g. on a
	// thread locked in a network namespace; it must call work once and
	// return when it does. A run inside the caller's process (a test)
	// needs it: the sockets are made on the worker's thread.
	Worker func(work func())
}

// RunConfig runs c.Conc workers, each opening a connection to a random
// target, reading the server's byte and closing, until c.Duration is over
// (or c.Count connections were tried), and returns what they measured.
func RunConfig(c Config) Result {
	type worker struct {
		ok, failed, timeouts int
		errs                 map[string]int
		examples             map[string]string
		lat                  []time.Duration
	}
	ws := make([]worker, c.Conc)
	start := time.Now()
	end := start.Add(c.Duration)
	var tried atomic.Int64
	more := func() bool {
		return time.Now().Before(end) && (c.Count == 0 || tried.Add(1) <= int64(c.Count))
	}
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func(w *worker, seed uint64) {
			defer wg.Done()
			w.errs, w.examples = map[string]int{}, map[string]string{}
			rng := rand.New(rand.NewPCG(seed, 0x6e6174))
			d := net.Dialer{Timeout: c.Timeout}
			buf := make([]byte, 1)
			work := func() {
				for more() {
					t0 := time.Now()
					conn, err := d.Dial("tcp", c.Targets[rng.IntN(len(c.Targets))])
					if err == nil {
						conn.SetReadDeadline(t0.Add(c.Timeout))
						_, err = io.ReadFull(conn, buf)
						conn.Close()
					}
					if err != nil {
						w.failed++
						var ne net.Error
						if errors.As(err, &ne) && ne.Timeout() {
							w.timeouts++
						}
						k := ErrKind(err)
						if w.errs[k]++; w.errs[k] == 1 {
							w.examples[k] = fmt.Sprintf("%v (after %v)", err, time.Since(t0).Round(time.Millisecond))
						}
						continue
					}
					w.ok++
					w.lat = append(w.lat, time.Since(t0))
				}
			}
			if c.Worker != nil {
				c.Worker(work)
			} else {
				work()
			}
		}(&ws[i], uint64(i)+uint64(start.UnixNano()))
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := Result{Errors: map[string]int{}, Seconds: elapsed.Seconds(), Targets: len(c.Targets), Conc: c.Conc}
	var lat []time.Duration
	for _, w := range ws {
		res.OK += w.ok
		res.Failed += w.failed
		res.Timeouts += w.timeouts
		for k, v := range w.errs {
			res.Errors[k] += v
		}
		for k, v := range w.examples {
			if res.Examples == nil {
				res.Examples = map[string]string{}
			}
			if _, had := res.Examples[k]; !had {
				res.Examples[k] = v
			}
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
