package core

// Faults are the fault points of the validate/apply/rollback runner: apply
// code calls At with a point's name ("veth-created", "datapath-programmed",
// ...) between two steps; a test sets Hook to fail the operation at one of
// them and checks that nothing is left half-applied. The zero value never
// fails.
type Faults struct {
	// Hook, set by tests only, is called at every fault point; its error
	// fails the operation there.
	Hook func(point string) error
}

// At is one fault point: nil unless a test's Hook fails it.
func (f *Faults) At(point string) error {
	if f.Hook != nil {
		return f.Hook(point)
	}
	return nil
}
