package main

// The cost of observability on the tc path (`make bench BENCH=observe`,
// issue 19): the tc mode as is (observability off: no metrics endpoint, no
// monitor client, so the datapath's monitor hooks are one branch each on a
// zero word) against the same with a Prometheus scrape every second
// (tc+metrics), with `xlane monitor` attached with its default types
// (tc+monitor: drops, firewall verdicts, flows, NAT, backends) and with
// every type (tc+monitor-all: a verdict event per packet, up to the
// daemon's --monitor-rate), and, given -baseline REF, tc built from REF
// (tc@base: before the monitor's hooks existed, the cost of the branch
// itself). Same topology, tests and statistics as the modes benchmark;
// ratios against tc.

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xlane-dev/xlane/bench/internal/harness"
)

// observeModes are the tc variants of the observability benchmark.
var observeModes = []string{"tc+metrics", "tc+monitor", "tc+monitor-all", "tc@base"}

// observeDefault is -observe's mode list (tc@base joins with -baseline).
const observeDefault = "tc,tc+metrics,tc+monitor,tc+monitor-all"

// reportName prefixes the result files: modes, or observe with -observe.
var reportName = "modes"

// splitVariant splits "tc+monitor" into the network mode and the variant.
func splitVariant(mode string) (netMode, variant string) {
	if m, v, ok := strings.Cut(mode, "+"); ok {
		return m, v
	}
	if m, v, ok := strings.Cut(mode, "@"); ok {
		return m, "@" + v
	}
	return mode, ""
}

// safeName is mode usable in namespace and pin names.
func safeName(mode string) string { return strings.NewReplacer("+", "-", "@", "-").Replace(mode) }

// buildBaseline builds xlaned and xlane of git ref into dir (from `git
// archive`, so the work tree is not touched).
func buildBaseline(ctx context.Context, ref, dir string) error {
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	log.Printf("build baseline %s", ref)
	archive := exec.CommandContext(ctx, "sh", "-c", `git archive "$1" | tar -x -C "$2"`, "sh", ref, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %w\n%s", ref, err, out)
	}
	for _, name := range []string{"xlaned", "xlane"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s of %s: %w\n%s", name, ref, err, out)
		}
	}
	return nil
}

// observeArgs are the daemon flags of a variant.
func (x *xlaneTopo) observeArgs() []string {
	if x.variant == "metrics" {
		return []string{"--metrics-addr", "unix:" + filepath.Join(x.dir, "metrics.sock")}
	}
	return nil
}

// startObserver starts what a variant adds once the daemon runs: the
// scraper or the monitor client; Teardown stops it.
func (x *xlaneTopo) startObserver(ctx context.Context) error {
	switch x.variant {
	case "metrics":
		return x.startScraper()
	case "monitor", "monitor-all":
		argv := []string{filepath.Join(x.bins, "xlane"), "--socket", filepath.Join(x.dir, "xlane.sock"), "monitor", "-o", "json"}
		if x.variant == "monitor-all" {
			argv = append(argv, "-t", "all")
		}
		// The events go nowhere: the client's cost is the daemon's and the
		// CLI's, not a disk's.
		p, err := harness.StartProc("xlane monitor ("+x.name+")", os.DevNull, argv...)
		if err != nil {
			return err
		}
		x.undo.Push("stop "+p.Name, p.Stop)
		time.Sleep(500 * time.Millisecond)
		if p.Exited() {
			return fmt.Errorf("xlane monitor exited: %s", p.Tail())
		}
	}
	return nil
}

// startScraper GETs /metrics every second, as a Prometheus would.
func (x *xlaneTopo) startScraper() error {
	sock := filepath.Join(x.dir, "metrics.sock")
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	scrape := func() error {
		resp, err := cl.Get("http://xlaned/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /metrics: %s", resp.Status)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := scrape(); err != nil {
		return fmt.Errorf("metrics endpoint of %s: %w", x.name, err)
	}
	var n, failed atomic.Int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := scrape(); err != nil {
					failed.Add(1)
				} else {
					n.Add(1)
				}
			}
		}
	}()
	x.undo.Push("stop the scraper of "+x.name, func(context.Context) error {
		close(stop)
		log.Printf("%s: %d scrapes, %d failed", x.name, n.Load(), failed.Load())
		return nil
	})
	return nil
}
