package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/xlaned"
)

// inDaemon serves a daemon of its own, in a namespace of its own.
func inDaemon(t *testing.T, fn func(h http.Handler)) {
	t.Helper()
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	pinDir := fmt.Sprintf("/sys/fs/bpf/xlts-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	err = node.Do(func(ns.NetNS) error {
		log := slog.New(slog.DiscardHandler)
		d, err := xlaned.Start(context.Background(), daemon.Config{StatePath: filepath.Join(t.TempDir(), "state.db"), PinDir: pinDir, Log: log})
		if err != nil {
			return err
		}
		defer d.Close()
		fn(Handler(d, log))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ruleSetJSON is a rule set of n rules as JSON, about 60 bytes a rule.
func ruleSetJSON(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"ruleset":{"rules":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"r%d","action":"drop","proto":["tcp"],"dport":["%d"]}`, i, 1+i%65535)
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// chunked hides a body's length, as a streaming client would.
type chunked struct{ io.Reader }

// Refused huge requests are refused early with a clear error (413 naming
// the limit, or 400 naming rules) and cost little memory: the old code
// decoded a 100,000-rule file in full before refusing it, and xlaned kept
// ~150 MB of it.
func TestHugeRequestsRefusedCheaply(t *testing.T) {
	inDaemon(t, func(h http.Handler) {
		big := bytes.Repeat([]byte(" "), 10<<20)
		huge := ruleSetJSON(100_000)
		padded := append(append([]byte{}, huge[:len(huge)-1]...), big...)
		padded = append(padded, '}')
		cases := []struct {
			name, method, path string
			body               io.Reader
			status             int
			code, field, msg   string
			maxAlloc           uint64
		}{
			{"10 MB network create", "POST", api.PathNetworks, bytes.NewReader(big), 413, api.CodeTooLarge, "body", "1048576 bytes", 1 << 20},
			{"10 MB network create, no length", "POST", api.PathNetworks, chunked{bytes.NewReader(big)}, 413, api.CodeTooLarge, "body", "1048576 bytes", 8 << 20},
			{"100,000 rules", "PUT", api.PathFirewall, bytes.NewReader(huge), 400, api.CodeInvalid, "rules", "rules over 16384", 48 << 20},
			{"100,000 rules in 17 MB", "PUT", api.PathFirewall, bytes.NewReader(padded), 413, api.CodeTooLarge, "body", "16777216 bytes", 1 << 20},
			{"100,000 rules in 17 MB, no length", "PUT", api.PathFirewall, chunked{bytes.NewReader(padded)}, 413, api.CodeTooLarge, "body", "16777216 bytes", 48 << 20},
			{"100,000 rules diff", "POST", api.PathFirewallDiff, bytes.NewReader(huge), 400, api.CodeInvalid, "rules", "rules over 16384", 48 << 20},
		}
		rss0 := rss(t)
		for _, tc := range cases {
			req := httptest.NewRequest(tc.method, tc.path, tc.body)
			w := httptest.NewRecorder()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h.ServeHTTP(w, req)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			var body api.ErrorBody
			json.Unmarshal(w.Body.Bytes(), &body)
			t.Logf("%s: %d %+v, %d MB allocated", tc.name, w.Code, body.Error, alloc>>20)
			if w.Code != tc.status || body.Error.Code != tc.code || body.Error.Field != tc.field || !strings.Contains(body.Error.Message, tc.msg) {
				t.Errorf("%s: %d %+v, want %d %s naming %s, %q", tc.name, w.Code, body.Error, tc.status, tc.code, tc.field, tc.msg)
			}
			if alloc > tc.maxAlloc {
				t.Errorf("%s: allocated %d MB to refuse it, want at most %d MB", tc.name, alloc>>20, tc.maxAlloc>>20)
			}
		}
		runtime.GC()
		t.Logf("RSS after the refused requests: %+d MB", (rss(t)-rss0)>>20)
		// A legitimate rule set still goes through.
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", api.PathFirewallDiff, bytes.NewReader(ruleSetJSON(100))))
		if w.Code != 200 {
			t.Errorf("100-rule diff: %d %s", w.Code, w.Body)
		}
	})
}

func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Errors echo what they refuse clipped: a 10 MB firewall rule name made a
// 31 MB error reply (the name twice, quoted, in field and message) and
// left xlaned ~120 MB larger.
func TestErrorsEchoLittle(t *testing.T) {
	inDaemon(t, func(h http.Handler) {
		name := strings.Repeat("n", 10<<20)
		cases := []struct {
			name, method, path, body, field string
		}{
			{"10 MB rule name", "POST", api.PathFirewallRules, `{"name":"` + name + `","action":"drop"}`, "rules[0].name"},
			{"10 MB rule name in a set", "PUT", api.PathFirewall, `{"ruleset":{"rules":[{"name":"` + name + `","action":"drop"}]}}`, "rules[0].name"},
			{"10 MB rule comment", "POST", api.PathFirewallRules, `{"name":"a","action":"drop","comment":"` + name + `"}`, "rules[a].comment"},
			{"1 MB network name", "POST", api.PathNetworks, `{"name":"` + name[:1<<20-100] + `","subnets":["10.1.0.0/24"]}`, "name"},
		}
		rss0 := rss(t)
		for _, tc := range cases {
			w := httptest.NewRecorder()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			runtime.ReadMemStats(&after)
			var body api.ErrorBody
			json.Unmarshal(w.Body.Bytes(), &body)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %d, %d-byte reply, %d MB allocated: %.200s", tc.name, w.Code, w.Body.Len(), alloc>>20, w.Body)
			if w.Code != 400 || body.Error.Field != tc.field || w.Body.Len() > 4096 {
				t.Errorf("%s: %d, field %q, %d-byte reply; want 400 naming %s in at most 4 KB", tc.name, w.Code, body.Error.Field, w.Body.Len(), tc.field)
			}
			// Decoding costs a few times the body (the rule set path reads it
			// whole, counts its rules, then decodes it): 42-116 MB for these,
			// 183-454 MB before, when the errors echoed the whole value.
			if limit := uint64(len(tc.body)) * 12; alloc > limit {
				t.Errorf("%s: allocated %d MB to refuse a %d MB body, want at most %d MB", tc.name, alloc>>20, len(tc.body)>>20, limit>>20)
			}
		}
		runtime.GC()
		t.Logf("RSS after the refused requests: %+d MB", (rss(t)-rss0)>>20)
	})
}
