package bpf

// The result of BenchmarkObserveCost (observe_bench_test.go), which
// bench/modes -observe runs and reads: defined here, outside the test
// files, so that both use this one definition.

// ObserveResult is what BenchmarkObserveCost writes to XLANE_OBSERVE_JSON:
// per path and variant, one sample (ns per run) per round, in round order.
type ObserveResult struct {
	Rounds   int                             `json:"rounds"`
	Variants []string                        `json:"variants"`
	Paths    []ObservePath                   `json:"paths"`
	Samples  map[string]map[string][]float64 `json:"samples"` // path -> variant -> ns/run per round
	Counters []ObserveCounters               `json:"counters"`
	Seconds  float64                         `json:"seconds"`
}

// ObservePath is one measured packet.
type ObservePath struct {
	Name     string `json:"name"`
	FrameLen int    `json:"frame_len"`
	Runs     int    `json:"runs_per_sample"`
	// The listeners' rate limit on this path: runs per token (0: the
	// daemon's rate as is), and the rate and burst that gave it.
	PerToken int    `json:"runs_per_token"`
	Rate     uint32 `json:"rate"`
	Burst    uint32 `json:"burst"`
	// DroppedCalls: calls left out of their samples, 3 times slower
	// than the sample's median call (over every variant and round).
	DroppedCalls int `json:"dropped_calls"`
}

// ObserveCounters are a variant's monitor counters after the benchmark.
type ObserveCounters struct {
	Variant    string `json:"variant"`
	Emitted    uint64 `json:"emitted"`
	Suppressed uint64 `json:"suppressed"`
}
