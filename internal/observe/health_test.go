package observe

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// The health summary's last error is the last record at Warn or above,
// with its attributes (those added by With too); Info is not one.
func TestLastErrorRecorded(t *testing.T) {
	var rec LastError
	log := slog.New(rec.Handler(slog.NewTextHandler(io.Discard, nil)))
	log.Info("fine")
	if e := rec.Get(); e != nil {
		t.Fatalf("info recorded: %+v", e)
	}
	log.With("part", "gc").Warn("conntrack gc", "err", "boom")
	log.Info("fine again")
	e := rec.Get()
	if e == nil || e.Level != "warn" || !strings.Contains(e.Message, "conntrack gc") ||
		!strings.Contains(e.Message, "part=gc") || !strings.Contains(e.Message, "err=boom") {
		t.Fatalf("last error %+v", e)
	}
	log.Error("worse")
	if e := rec.Get(); e.Level != "error" || e.Message != "worse" {
		t.Fatalf("last error %+v", e)
	}
}
