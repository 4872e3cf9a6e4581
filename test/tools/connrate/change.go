package connrate

// The EndpointSlice-change probe, shared by bench/k8s and bench/peers:
// ProbeChange runs in a client pod (the benchmark's binary as a
// subcommand), a ChangeProber drives it from the benchmark.
//
// ProbeChange reads a byte from each line of stdin (the backend that must
// answer next, a Server's -id), then connects to the target once a
// millisecond until that backend answers and prints the time it did (Unix
// nanoseconds), or "timeout" after -timeout (10 s). The caller writes the
// line, changes the EndpointSlice, and subtracts the time of its update
// call.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ProbeOnce connects to target, reads its one byte and closes.
func ProbeOnce(target string, timeout time.Duration) (byte, error) {
	c, err := net.DialTimeout("tcp", target, timeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(timeout))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// ProbeChange is the probe's process: -target IP:PORT [-timeout 10s].
func ProbeChange(args []string) int {
	fs := flag.NewFlagSet("probe-change", flag.ContinueOnError)
	target := fs.String("target", "", "IP:PORT")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on one change after")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *target == "" {
		fmt.Fprintln(os.Stderr, "probe-change: -target: missing")
		return 2
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		want := strings.TrimSpace(sc.Text())
		if len(want) != 1 {
			fmt.Fprintf(os.Stderr, "probe-change: stdin: %q: want one byte a line\n", want)
			return 2
		}
		deadline := time.Now().Add(*timeout)
		var got byte
		var err error
		for {
			got, err = ProbeOnce(*target, 200*time.Millisecond)
			if err == nil && got == want[0] {
				fmt.Println(time.Now().UnixNano())
				break
			}
			if time.Now().After(deadline) {
				fmt.Printf("timeout (last answer %q, %v)\n", got, err)
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return 1
	}
	return 0
}

// ChangeProber is a ProbeChange process the benchmark drives.
type ChangeProber struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// StartChangeProber starts cmd (ProbeChange in a client's namespace) and
// waits for its "ready"; name is in its errors.
func StartChangeProber(name string, cmd *exec.Cmd) (*ChangeProber, error) {
	p := &ChangeProber{name: name, cmd: cmd}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := p.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		p.Close()
		return nil, fmt.Errorf("%s: probe-change: %q, %v", name, line, err)
	}
	return p, nil
}

// Expect tells the prober which backend answers after the next change.
func (p *ChangeProber) Expect(b byte) error {
	_, err := fmt.Fprintf(p.stdin, "%c\n", b)
	return err
}

// Result is when the expected backend first answered.
func (p *ChangeProber) Result() (time.Time, error) {
	line, err := p.out.ReadString('\n')
	if err != nil {
		return time.Time{}, fmt.Errorf("probe-change: %w", err)
	}
	line = strings.TrimSpace(line)
	ns, err := strconv.ParseInt(line, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("probe-change: %s", line)
	}
	return time.Unix(0, ns), nil
}

// Settled has the prober wait until backend b answers (the previous
// change applied), trying twice: after a change not seen in one timeout,
// the next would otherwise be "seen" at once.
func (p *ChangeProber) Settled(b byte) error {
	var err error
	for range 2 {
		if err = p.Expect(b); err != nil {
			return err
		}
		if _, err = p.Result(); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: the previous change not applied after two tries: %w", p.name, err)
}

// Close ends the prober: stdin closed, it exits; killed by pid after 5 s.
func (p *ChangeProber) Close() {
	p.stdin.Close()
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-exited
	}
}
