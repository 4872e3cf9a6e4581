package firewall_test

import (
	"hash/fnv"
	"math/rand/v2"
)

func newRand(seed []byte) *rand.Rand {
	h := fnv.New64a()
	h.Write(seed)
	return rand.New(rand.NewPCG(h.Sum64(), 1))
}
