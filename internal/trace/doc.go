// Package trace builds and reads the packets of `xlane trace`: a frame
// from fields (Build) or a capture (ReadPcap), the 5-tuple and one-line
// summary of a frame (Parse), and the stages' decisions told from what a
// run of the programs reported (Stages, stages.go). Running the programs
// is internal/bpf's (Tracer); choosing them, the daemon's.
package trace
