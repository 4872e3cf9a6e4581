package api

import (
	"encoding/json"
	"testing"
	"time"
)

// TestMonitorLineType: the type xlane monitor -o json counts by is the
// event's, as the daemon encodes it (time first, then type), whatever
// the other fields hold.
func TestMonitorLineType(t *testing.T) {
	for _, ev := range []MonitorEvent{
		{Time: time.Unix(1, 2).UTC(), Type: "stats", Counters: &MonitorCounters{Events: 3}},
		{Time: time.Now(), Type: "drop", Reason: "drop_fw", Rule: `a "type":"stats" rule`, Src: "10.0.0.1"},
		{Time: time.Now(), Type: "flow_new"},
	} {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := MonitorLineType(line); got != ev.Type {
			t.Errorf("MonitorLineType(%s) = %q, want %q", line, got, ev.Type)
		}
	}
	for _, line := range []string{"", "{}", `{"time":"x","type":"unterminated`} {
		if got := MonitorLineType([]byte(line)); got != "" {
			t.Errorf("MonitorLineType(%q) = %q, want \"\"", line, got)
		}
	}
}
