package accel

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xlane-dev/xlane/internal/bpf"
)

// MaybeChild runs the self-test's cases and exits when this process is
// the self-test's child (XLANE_ACCEL_SELFTEST set); otherwise it returns
// at once. Call it first thing in main (and in TestMain).
func MaybeChild() {
	v, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	os.Unsetenv(childEnv)
	var o Options
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		fmt.Fprintln(os.Stderr, "accel self-test: bad options:", err)
		os.Exit(2)
	}
	res, err := runChild(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accel self-test:", err)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(res)
	os.Exit(0)
}

// env is what a case has: the throwaway maps (fds 3, 4, 5 from the
// parent) and the options.
type env struct {
	config, stats, socks *ebpf.Map
	large                int
	// backlog is the programs' max_backlog (accel_config).
	backlog int
}

func runChild(o Options) ([]CaseResult, error) {
	var e env
	for i, p := range []**ebpf.Map{&e.config, &e.stats, &e.socks} {
		m, err := ebpf.NewMapFromFD(3 + i)
		if err != nil {
			return nil, fmt.Errorf("map fd %d: %w", 3+i, err)
		}
		*p = m
	}
	e.large = o.LargeBytes
	if e.large == 0 {
		e.large = 16 << 20
	}
	var cfg bpf.AccelConfig
	if err := e.config.Lookup(uint32(0), &cfg); err != nil {
		return nil, fmt.Errorf("read the acceleration config: %w", err)
	}
	e.backlog = int(cfg.MaxBacklog)
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return nil, fmt.Errorf("bring lo up: %w", err)
	}
	timeout := o.CaseTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	var res []CaseResult
	for _, c := range cases {
		if len(o.Cases) > 0 && !contains(o.Cases, c.name) {
			continue
		}
		res = append(res, e.run(c, timeout))
	}
	return res, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// RunCases runs the named cases (nil: all that need no maps) in this
// process, on whatever acceleration its cgroup has: the end-to-end tests
// run them against the daemon's programs. Cases that switch acceleration
// or empty the socket map (pre-existing, disable-under-load, leave-map)
// need the self-test's throwaway maps and are refused here.
func RunCases(names []string, large int, timeout time.Duration) ([]CaseResult, error) {
	e := &env{large: large, backlog: int(MaxBacklog())}
	if e.large == 0 {
		e.large = 16 << 20
	}
	var res []CaseResult
	for _, c := range cases {
		if names != nil && !contains(names, c.name) {
			continue
		}
		if mapCases[c.name] {
			if names != nil {
				return nil, fmt.Errorf("case %s needs the self-test's maps", c.name)
			}
			continue
		}
		c.mustRedirect = false // the caller reads the daemon's counters
		res = append(res, e.run(c, timeout))
	}
	return res, nil
}

var mapCases = map[string]bool{"pre-existing": true, "disable-under-load": true, "leave-map": true}

func (e *env) redirected() uint64 { return e.stat("bytes_redirected") }

// stat is counter name of the self-test's maps (0 without them).
func (e *env) stat(name string) uint64 {
	if e.stats == nil {
		return 0
	}
	s, err := ReadStats(e.stats)
	if err != nil {
		return 0
	}
	return s[name]
}

func (e *env) run(c testCase, timeout time.Duration) CaseResult {
	r := CaseResult{Name: c.name}
	before := e.redirected()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.run(e, timeout) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout + time.Second):
		err = fmt.Errorf("stalled: no result after %s", timeout+time.Second)
	}
	r.Millis = time.Since(start).Milliseconds()
	r.Redirected = e.redirected() - before
	if err == nil && c.mustRedirect && r.Redirected == 0 {
		err = fmt.Errorf("not accelerated: the fast path carried no bytes")
	}
	// Whatever a case did to the switch, the next one starts with it on.
	if e.config != nil {
		SetOn(e.config, true)
	}
	if err != nil {
		r.Error = err.Error()
	} else {
		r.OK = true
	}
	return r
}
