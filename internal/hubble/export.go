package hubble

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/encoding/protojson"
)

// Export's defaults: Cilium's (--hubble-export-file-max-size-mb 10,
// --hubble-export-file-max-backups 5).
const (
	DefaultExportMaxSize    = 10 << 20
	DefaultExportMaxBackups = 5
	// ExportStdout is the ExportPath of xlaned's standard output.
	ExportStdout = "stdout"
	// minExportSize is the smallest size a file is rotated at (a line
	// is up to ~1 KiB).
	minExportSize = 4 << 10
)

// ParseSize reads a size in bytes: a number with an optional K, M or G
// (KiB, MiB, GiB; powers of 1,024).
func ParseSize(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("%q: want a size in bytes, optionally with K, M or G (10M)", s)
	}
	return n * mult, nil
}

// ParseFilters reads FlowFilters written as JSON objects one after the
// other (`{"verdict":["DROPPED"]} {"source_pod":["kube-system/"]}`, as
// Cilium's --hubble-export-allowlist takes them; field names as in
// FlowFilter's JSON, snake_case or camelCase). Errors name flag and the
// filter's index.
func ParseFilters(flag, s string) ([]*flowpb.FlowFilter, error) {
	var out []*flowpb.FlowFilter
	dec := json.NewDecoder(strings.NewReader(s))
	for i := 0; ; i++ {
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: want JSON FlowFilter objects ({\"verdict\":[\"DROPPED\"]}): %w", flag, i, err)
		}
		var ff flowpb.FlowFilter
		if err := protojson.Unmarshal(raw, &ff); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", flag, i, err)
		}
		out = append(out, &ff)
	}
}

// exportFilters parses and compiles the export's allow and deny lists.
func (cfg *Config) exportFilters() (allow, deny filters, err error) {
	for _, l := range []struct {
		flag, s string
		out     *filters
	}{{"--hubble-export-allowlist", cfg.ExportAllow, &allow}, {"--hubble-export-denylist", cfg.ExportDeny, &deny}} {
		ffs, err := ParseFilters(l.flag, l.s)
		if err != nil {
			return nil, nil, err
		}
		if *l.out, err = compileFilters(l.flag, ffs); err != nil {
			return nil, nil, err
		}
	}
	return allow, deny, nil
}

// exporter writes the flows the ring gets, those its filters pass, as
// JSON lines: each a GetFlowsResponse as `hubble observe -o json` prints
// it (and Cilium's exporter writes); what the ring overwrote before the
// exporter got to it is a line of lost_events (HUBBLE_RING_BUFFER). It
// follows the ring as a GetFlows follower does, so a slow disk holds up
// no one.
type exporter struct {
	s           *Server
	allow, deny filters
	w           *rotator
	// exported lines, flows lost (overwritten before written), write
	// errors (the flows of a failed write are gone).
	exported, lost, errs atomic.Uint64
	lastErr              atomic.Pointer[string]
}

// startExport opens the export and follows the ring from now on until
// done.
func (s *Server) startExport(done <-chan struct{}) (*exporter, error) {
	allow, deny, err := s.cfg.exportFilters()
	if err != nil {
		return nil, err
	}
	w, err := openRotator(s.cfg.ExportPath, s.cfg.ExportMaxSize, s.cfg.ExportMaxBackups)
	if err != nil {
		return nil, fmt.Errorf("--hubble-export-file-path: %w", err)
	}
	e := &exporter{s: s, allow: allow, deny: deny, w: w}
	_, next, wait := s.ring.bounds()
	go func() {
		defer w.close()
		e.s.follow(done, next, wait, e.flow, e.lostEvents, e.flush)
	}()
	return e, nil
}

func (e *exporter) flow(r *record) error {
	f := e.s.toFlow(r)
	if (len(e.allow) > 0 && !e.allow.any(f)) || e.deny.any(f) {
		return nil
	}
	e.write(e.s.flowResponse(f))
	return nil
}

func (e *exporter) lostEvents(n uint64) error {
	e.lost.Add(n)
	e.write(e.s.lostResponse(n))
	return nil
}

// exportJSON is how Cilium's API types write themselves as JSON (their
// MarshalJSON, api/v1/observer/observer.pb.json.go): field names as in
// the .proto (node_name, drop_reason_desc).
var exportJSON = protojson.MarshalOptions{UseProtoNames: true}

func (e *exporter) write(resp *observerpb.GetFlowsResponse) {
	b, err := exportJSON.Marshal(resp)
	if err == nil {
		err = e.w.writeLine(b)
	}
	if err != nil {
		e.fail(err)
		return
	}
	e.exported.Add(1)
}

// flush writes out what is buffered: after each of the ring's batches.
func (e *exporter) flush() {
	if err := e.w.flush(); err != nil {
		e.fail(err)
	}
}

// fail counts a write error; the first of each minute is logged.
func (e *exporter) fail(err error) {
	n := e.errs.Add(1)
	msg := err.Error()
	e.lastErr.Store(&msg)
	if n == 1 || e.w.logDue() {
		e.s.c.Log().Warn("hubble: export", "path", e.s.cfg.ExportPath, "errors", n, "err", err)
	}
}

// rotator is a file of lines that, before growing past max bytes, is
// renamed PATH.1 (the older ones shifted to PATH.2 ... PATH.backups, the
// oldest removed) and begun anew; or xlaned's standard output, never
// rotated.
type rotator struct {
	path    string
	max     int64
	backups int

	mu      sync.Mutex
	f       *os.File
	w       *bufio.Writer
	size    int64
	lastLog time.Time
}

func openRotator(path string, max int64, backups int) (*rotator, error) {
	r := &rotator{path: path, max: max, backups: backups}
	if path == ExportStdout {
		r.f = os.Stdout
		r.w = bufio.NewWriter(os.Stdout)
		return r, nil
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// open opens the file for appending (after a restart the export goes on
// where it was).
func (r *rotator) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, fi.Size()
	if r.w == nil {
		r.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		r.w.Reset(f)
	}
	return nil
}

// writeLine writes b and a newline, rotating first if they would take
// the file past its size.
func (r *rotator) writeLine(b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		if err := r.open(); err != nil { // (a failed rotation: try again)
			return err
		}
	}
	if r.path != ExportStdout && r.size > 0 && r.size+int64(len(b))+1 > r.max {
		if err := r.rotate(); err != nil {
			return err
		}
	}
	r.w.Write(b)
	err := r.w.WriteByte('\n')
	r.size += int64(len(b)) + 1
	return err
}

// rotate closes the file and shifts it and its backups by one.
func (r *rotator) rotate() error {
	err := r.w.Flush()
	r.f.Close()
	r.f = nil
	if err != nil {
		r.w.Reset(io.Discard) // (what could not be written is lost)
	}
	if r.backups == 0 {
		if err := os.Remove(r.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("rotate: %w", err)
		}
	} else {
		os.Remove(fmt.Sprintf("%s.%d", r.path, r.backups))
		for i := r.backups - 1; i >= 1; i-- {
			if err := os.Rename(fmt.Sprintf("%s.%d", r.path, i), fmt.Sprintf("%s.%d", r.path, i+1)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("rotate: %w", err)
			}
		}
		if err := os.Rename(r.path, r.path+".1"); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
	}
	return r.open()
}

func (r *rotator) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	return r.w.Flush()
}

func (r *rotator) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return
	}
	r.w.Flush()
	if r.f != os.Stdout {
		r.f.Close()
	}
	r.f = nil
}

// logDue says whether a minute passed since the last logged error.
func (r *rotator) logDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lastLog) < time.Minute {
		return false
	}
	r.lastLog = time.Now()
	return true
}
