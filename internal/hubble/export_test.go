package hubble

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestExport: the export writes each flow its filters pass as a JSON line
// (a GetFlowsResponse, as hubble observe -o json), in order; the file is
// rotated before it grows past its size, with the backups asked for and
// no more.
func TestExport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flows.log")
	s, _ := testServer(t, 64)
	s.cfg.ExportPath, s.cfg.ExportMaxSize, s.cfg.ExportMaxBackups = path, minExportSize, 2
	s.cfg.ExportDeny = `{"destination_port":["13"]} {"destination_port":["14"]}`
	done := make(chan struct{})
	defer close(done)
	e, err := s.startExport(done)
	if err != nil {
		t.Fatal(err)
	}
	const flows = 60
	for p := uint16(1); p <= flows; p++ {
		s.ring.add([]record{rec(p)})
		want := uint64(p)
		if p >= 13 {
			want -= min(2, uint64(p)-12) // 13 and 14 denied
		}
		for deadline := time.Now().Add(5 * time.Second); e.exported.Load()+e.lost.Load() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d flows exported of %d", e.exported.Load(), p)
			}
		}
	}
	if e.exported.Load() != flows-2 || e.lost.Load() != 0 || e.errs.Load() != 0 {
		t.Fatalf("exported %d, lost %d, errors %d: want %d, 0, 0", e.exported.Load(), e.lost.Load(), e.errs.Load(), flows-2)
	}
	e.flush()
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("%s.3 is there (%v): want 2 backups", path, err)
	}
	var ports []uint32
	for _, f := range []string{path + ".2", path + ".1", path} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > minExportSize || fi.Size() == 0 {
			t.Errorf("%s: %d bytes, want 1 to %d", f, fi.Size(), minExportSize)
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		for sc := bufio.NewScanner(fh); sc.Scan(); {
			var r observerpb.GetFlowsResponse
			if err := protojson.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s: line %q: %v", f, sc.Text(), err)
			}
			if r.GetNodeName() != "n1" || r.GetFlow() == nil {
				t.Errorf("%s: line %q: want a flow of node n1", f, sc.Text())
			}
			ports = append(ports, tcpPort(r.GetFlow()))
		}
		fh.Close()
	}
	// The newest lines, in order, ending with the last flow; 13 and 14
	// denied.
	if len(ports) < 10 || ports[len(ports)-1] != flows {
		t.Fatalf("ports in the files %v: want the last ones up to %d", ports, flows)
	}
	for i := 1; i < len(ports); i++ {
		want := ports[i-1] + 1
		if want == 13 {
			want = 15
		}
		if ports[i] != want {
			t.Errorf("ports in the files %v: want consecutive ones without 13 and 14", ports)
			break
		}
	}
	t.Logf("%d lines kept of %d in 3 files of at most %d bytes", len(ports), flows-2, minExportSize)
}

// TestExportConfig: malformed export flags are refused, the error naming
// the flag and the filter.
func TestExportConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ExportPath: "x", ExportAllow: `{"source_ip":["10.0.0.300"]}`}, `--hubble-export-allowlist[0].source_ip: "10.0.0.300" is no address`},
		{Config{ExportPath: "x", ExportDeny: `{"verdict":["DROPPED"]} {"verdict":`}, "--hubble-export-denylist[1]: want JSON FlowFilter objects"},
		{Config{ExportPath: "x", ExportAllow: `{"no_such_field":1}`}, "--hubble-export-allowlist[0]: "},
		{Config{ExportPath: "x", ExportAllow: `{"verdict":["NO_SUCH"]}`}, "--hubble-export-allowlist[0]: "},
		{Config{ExportPath: "x", ExportDeny: `{"dns_query":["x"]}`}, "--hubble-export-denylist[0].dns_query"},
		{Config{ExportAllow: `{"verdict":["DROPPED"]}`}, "need --hubble-export-file-path"},
		{Config{ExportPath: "x", ExportMaxSize: 100}, "--hubble-export-file-max-size 100"},
		{Config{ExportPath: "x", ExportMaxBackups: -1}, "--hubble-export-file-max-backups -1"},
	} {
		c.cfg.Socket = "s"
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	ok := Config{Socket: "s", ExportPath: "x", ExportAllow: `{"verdict":["DROPPED"]} {"source_pod":["shop/"], "destinationPort":["80"]}`}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	for s, want := range map[string]int64{"0": 0, "4096": 4096, "64K": 64 << 10, "10M": 10 << 20, "1GiB": 1 << 30} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "M", "-1", "10 MB", "1.5M"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q): no error", s)
		}
	}
}
