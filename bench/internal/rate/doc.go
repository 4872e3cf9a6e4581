// Package rate drives bench/gen's live-frames generator for the benchmarks
// that measure small-packet rates (bench/modes' rate tests, bench/fw's
// drop rate): Generate runs it in the sending container pinned to GenCPU
// at SCHED_FIFO, and PrepareEntry gives the receiving side's processing
// (the host veth's threaded NAPI, or its RPS backlog and ksoftirqd) CPU
// NAPICPU at SCHED_FIFO, so that the generator outruns one core and the
// figure measured is that core's capacity. Options tune the generator
// (batch, a backfill thread on NAPICPU below the NAPI thread, the
// dispatcher anchor); GenRun and ReadThread say whether it did outrun the
// receiver (the threads' run and run-queue times from schedstat).
// EthtoolFeatures reads a device's offloads.
package rate
