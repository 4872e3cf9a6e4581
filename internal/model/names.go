package model

import (
	"fmt"
	"hash/fnv"
)

// MaxName is the longest name of a service or a firewall rule.
const MaxName = 64

// ClipName is s within MaxName characters: a longer one keeps its head
// and ends in a hash of the whole (names generated from longer ones:
// Kubernetes' services and policies' rules).
func ClipName(s string) string {
	if len(s) <= MaxName {
		return s
	}
	h := fnv.New64a()
	h.Write([]byte(s))
	sum := fmt.Sprintf("%016x", h.Sum64())
	return s[:MaxName-len(sum)-1] + "." + sum
}
