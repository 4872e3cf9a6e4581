// Package calibration is the first-start calibration, a feature of the
// daemon (internal/core's contract): it builds a throwaway network per mode
// that can run here, with two endpoints in throwaway namespaces (names
// under core.HiddenPrefix, so no listing shows them), measures TCP between
// them with package calibrate's probe in interleaved rounds, and records
// what `auto` means on this node (the mode, and BIG TCP on or off) in the
// store. Package calibrate holds the probe and the choice, which core, api
// and store use without this feature.
package calibration
