package services

import (
	"strings"
	"testing"
)

func TestNoBackendReject(t *testing.T) {
	for _, c := range []struct {
		in     string
		reject bool
		err    string
	}{
		{"", true, ""},
		{"reject", true, ""},
		{"drop", false, ""},
		{"refuse", false, `service-no-backend "refuse": want reject or drop`},
	} {
		reject, err := ParseNoBackend(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || reject != c.reject {
			t.Errorf("%q: %v, %v; want %v", c.in, reject, err, c.reject)
		}
	}
}
