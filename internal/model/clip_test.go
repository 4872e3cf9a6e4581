package model

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	if got := Clip("short", 10); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	long := strings.Repeat("é", 1000) // 2 bytes a rune
	got := Clip(long, 11)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, strings.Repeat("é", 5)+"...") || !strings.HasSuffix(got, "(1990 bytes more)") {
		t.Errorf("Clip(long, 11) = %q", got)
	}
	if got := Quote(strings.Repeat("a", 10<<20)); len(got) > 100 || !strings.Contains(got, "10485760 bytes") {
		t.Errorf("Quote(10 MB) = %q", got)
	}
	if got := Quote("web"); got != `"web"` {
		t.Errorf("Quote(web) = %s", got)
	}
}
