package daemon

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// The health summary's last error is the last record at Warn or above,
// with its attributes (those added by With too); Info is not one.
func TestLastErrorRecorded(t *testing.T) {
	var rec lastError
	log := slog.New(&recordingHandler{Handler: slog.NewTextHandler(io.Discard, nil), rec: &rec})
	log.Info("fine")
	if e := rec.get(); e != nil {
		t.Fatalf("info recorded: %+v", e)
	}
	log.With("part", "gc").Warn("conntrack gc", "err", "boom")
	log.Info("fine again")
	e := rec.get()
	if e == nil || e.Level != "warn" || !strings.Contains(e.Message, "conntrack gc") ||
		!strings.Contains(e.Message, "part=gc") || !strings.Contains(e.Message, "err=boom") {
		t.Fatalf("last error %+v", e)
	}
	log.Error("worse")
	if e := rec.get(); e.Level != "error" || e.Message != "worse" {
		t.Fatalf("last error %+v", e)
	}
}
