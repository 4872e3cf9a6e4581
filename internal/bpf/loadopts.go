package bpf

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// sockSpecOptions pins spec's maps in pinDir, or none of them for "".
func sockSpecOptions(spec *ebpf.CollectionSpec, pinDir string) (*ebpf.CollectionOptions, error) {
	opts := &ebpf.CollectionOptions{}
	if pinDir == "" {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		return opts, nil
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin dir: %w", err)
	}
	if _, err := replaceIncompatiblePins(spec, pinDir); err != nil {
		return nil, err
	}
	opts.Maps.PinPath = pinDir
	return opts, nil
}
