package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlane-dev/xlane/internal/api"
	"github.com/xlane-dev/xlane/internal/model"
)

// TestServiceApplyCLI: `xlane service apply -f` creates and updates many
// services at once; a bad one anywhere in the file leaves every service as
// it was and the error names it; --prune removes the services not listed.
func TestServiceApplyCLI(t *testing.T) {
	n := newNode(t)
	file := filepath.Join(t.TempDir(), "services.json")
	apply := func(svcs []api.ServiceCreate, args ...string) (model.ServiceApplyResult, string, error) {
		raw, _ := json.Marshal(svcs)
		if err := os.WriteFile(file, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		out, stderr, err := n.xlane(append([]string{"service", "apply", "-f", file, "-o", "json"}, args...)...)
		var res model.ServiceApplyResult
		if err == nil {
			json.Unmarshal([]byte(out), &res)
		}
		return res, stderr, err
	}
	count := func() int {
		var svcs []json.RawMessage
		n.mustXlane(&svcs, "service", "ls")
		return len(svcs)
	}
	good := []api.ServiceCreate{
		{Name: "web", VIP: "10.96.5.1:80/tcp", Backends: []string{"10.85.0.2:8080", "10.85.0.3:8080@2"}},
		{Name: "dns", VIP: "10.96.5.2:53/udp", Backends: []string{"10.85.0.4:53"}},
		{Name: "web6", VIP: "[fd00:96::5]:80", Backends: []string{"[fd00:85::2]:8080"}, Affinity: true},
	}
	bad := append(append([]api.ServiceCreate{}, good...), api.ServiceCreate{Name: "oops", VIP: "10.96.5.9:80", Backends: []string{"[fd00:85::9]:80"}})
	if _, stderr, err := apply(bad); err == nil || !strings.Contains(stderr, "services[3]") || !strings.Contains(stderr, "backend") {
		t.Fatalf("apply with a bad backend: %v %q, want an error naming services[3] and its backend", err, stderr)
	}
	if c := count(); c != 0 {
		t.Fatalf("%d services after a refused apply, want 0", c)
	}
	if res, stderr, err := apply(good); err != nil || res.Created != 3 || res.Services != 3 {
		t.Fatalf("apply: %+v %v %s", res, err, stderr)
	}
	good[0].Backends = good[0].Backends[:1]
	if res, stderr, err := apply(good); err != nil || res.Updated != 1 || res.Unchanged != 2 {
		t.Fatalf("apply again, one changed: %+v %v %s", res, err, stderr)
	}
	if res, stderr, err := apply(good[:1], "--prune"); err != nil || res.Deleted != 2 || res.Services != 1 {
		t.Fatalf("apply --prune: %+v %v %s", res, err, stderr)
	}
	var st api.Status
	n.mustXlane(&st, "status")
	if st.Services == nil || st.Services.Services != 1 || st.Services.PerServiceBytes == 0 {
		t.Errorf("status services %+v: want 1 service and its memory", st.Services)
	}
}
