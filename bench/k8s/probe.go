package main

// The probes, this binary run inside a client pod's namespace:
//
//	k8s probe-ready  -targets FILE -timeout 3m   # until every target answers
//	k8s probe-ready  -targets FILE -count-only   # how many answer, one try each
//	k8s probe-change -target VIP:PORT            # stdin: one expected byte a line
//
// probe-ready connects to each target in turn (connect, read the
// backend's byte, close), retrying one that fails every 10 ms, and prints
// the wall-clock time (Unix nanoseconds) at which the last of them first
// answered: services are only ever added while it runs, so that is the
// moment every target was in place.
//
// probe-change is connrate.ProbeChange (shared with bench/peers): it
// reads a byte from each line of stdin (the backend that
// must answer next), then connects to the target once a millisecond until
// that backend answers and prints the time it did (Unix nanoseconds), or
// "timeout" after 10 s. The caller writes the line, changes the
// EndpointSlice, and subtracts the time of its update call.

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/xlane-dev/xlane/test/tools/connrate"
)

func probeReady(args []string) int {
	fs := flag.NewFlagSet("probe-ready", flag.ContinueOnError)
	targets := fs.String("targets", "", "file with one IP:PORT per line")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after")
	connTimeout := fs.Duration("conn-timeout", 300*time.Millisecond, "connect + first byte timeout of one try")
	countOnly := fs.Bool("count-only", false, "try each target once and print how many answered")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ts, err := connrate.ReadTargets(*targets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe-ready:", err)
		return 1
	}
	if *countOnly {
		ok := 0
		for _, t := range ts {
			if _, err := connrate.ProbeOnce(t, *connTimeout); err == nil {
				ok++
			}
		}
		fmt.Println(ok)
		return 0
	}
	deadline := time.Now().Add(*timeout)
	var last time.Time
	for _, t := range ts {
		for {
			if _, err := connrate.ProbeOnce(t, *connTimeout); err == nil {
				last = time.Now()
				break
			} else if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "probe-ready: %s not answering after %v: %v\n", t, *timeout, err)
				return 1
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Println(last.UnixNano())
	return 0
}

func probeChange(args []string) int { return connrate.ProbeChange(args) }
