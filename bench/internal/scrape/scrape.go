// Package scrape is the load of a Prometheus that scrapes xlaned's
// metrics endpoint every interval, for benchmarks: Start scrapes from the
// node's namespace (where the endpoint's loopback address lives) until
// stopped and returns each scrape's time, size and series, and the CPU
// time the daemon spent meanwhile (/proc/PID/stat). bench/scrape uses it
// for the cost of a scrape as the node grows; an overhead benchmark can
// run it beside its traffic for the "scraped every second" case.
package scrape

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// One is one scrape.
type One struct {
	Duration time.Duration
	Bytes    int
	Series   int // sample lines
	Err      error
}

// Result is a scraping run.
type Result struct {
	Scrapes   []One
	Wall      time.Duration
	DaemonCPU time.Duration // the daemon's user + system time over Wall (0 without a pid)
}

// OK counts the scrapes that succeeded.
func (r Result) OK() int {
	n := 0
	for _, s := range r.Scrapes {
		if s.Err == nil {
			n++
		}
	}
	return n
}

// Quantile is the q-quantile (0..1) of the successful scrapes' durations.
func (r Result) Quantile(q float64) time.Duration {
	var ds []time.Duration
	for _, s := range r.Scrapes {
		if s.Err == nil {
			ds = append(ds, s.Duration)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(q*float64(len(ds)-1) + 0.5)
	return ds[i]
}

// Last is the last successful scrape (zero if none).
func (r Result) Last() One {
	for i := len(r.Scrapes) - 1; i >= 0; i-- {
		if r.Scrapes[i].Err == nil {
			return r.Scrapes[i]
		}
	}
	return One{}
}

// CPUPerScrape is the daemon's CPU time per scrape (its other work
// included: a quiet daemon does little else).
func (r Result) CPUPerScrape() time.Duration {
	if len(r.Scrapes) == 0 {
		return 0
	}
	return r.DaemonCPU / time.Duration(len(r.Scrapes))
}

// Client is an HTTP client whose connections are made in the network
// namespace at nsPath ("" : the caller's).
func Client(nsPath string) *http.Client {
	tr := &http.Transport{DisableKeepAlives: false}
	if nsPath != "" {
		tr.DialContext = func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// Get scrapes url once.
func Get(c *http.Client, url string) One {
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return One{Err: err, Duration: time.Since(start)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	o := One{Duration: time.Since(start), Bytes: len(body), Err: err}
	if err == nil && resp.StatusCode != http.StatusOK {
		o.Err = fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Bytes(); len(l) > 0 && l[0] != '#' {
			o.Series++
		}
	}
	return o
}

// Start scrapes url every interval, as Prometheus would, until the
// returned stop is called; pid is the daemon's (0: no CPU accounting).
func Start(c *http.Client, url string, every time.Duration, pid int) (stop func() Result) {
	var (
		mu   sync.Mutex
		res  Result
		done = make(chan struct{})
		over = make(chan struct{})
	)
	cpu0, _ := CPUTime(pid)
	start := time.Now()
	go func() {
		defer close(over)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			o := Get(c, url)
			mu.Lock()
			res.Scrapes = append(res.Scrapes, o)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() Result {
		close(done)
		<-over
		mu.Lock()
		defer mu.Unlock()
		res.Wall = time.Since(start)
		if cpu1, err := CPUTime(pid); err == nil && pid != 0 {
			res.DaemonCPU = cpu1 - cpu0
		}
		return res
	}
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture xlane runs on.
const clockTick = 100

// CPUTime is a process' user + system time (/proc/PID/stat fields 14, 15).
func CPUTime(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// parseStat reads utime + stime of a /proc/PID/stat line; the command
// name (field 2) may hold spaces and parentheses, so fields are counted
// after its last ')'.
func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: too few fields", s)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat %q: utime %q stime %q", s, f[11], f[12])
	}
	return time.Duration(u+st) * time.Second / clockTick, nil
}
