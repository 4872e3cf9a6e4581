package model

import (
	"fmt"
	"unicode/utf8"
)

// Clip returns s cut to at most n bytes (on a rune boundary) with what was
// left out said, for echoing input in errors and logs: a value is echoed
// so that people recognise it, and an unbounded one must not cost an
// unbounded reply (a 10 MB firewall rule name made a 31 MB error).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	c := clipAt(s, n)
	return fmt.Sprintf("%s... (%d bytes more)", s[:c], len(s)-c)
}

// Quote is %q of s, of its first 64 bytes and its length when longer.
func Quote(s string) string {
	if len(s) <= 64 {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:clipAt(s, 64)], len(s))
}

// clipAt is the largest rune boundary of s at or below n < len(s).
func clipAt(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
