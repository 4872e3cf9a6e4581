package daemon

// StartForTest opens, wires and starts a daemon as xlaned does
// (xlaned.Start) and FeaturesForTest makes a daemon's features as xlaned
// does (xlaned.Features): both set by wire_ext_test.go, since this
// package's tests cannot import internal/xlaned, which imports it.
var (
	StartForTest    func(Config) (*Daemon, error)
	FeaturesForTest func(*Daemon) (Features, error)
)

// newDaemon is StartForTest.
func newDaemon(cfg Config) (*Daemon, error) { return StartForTest(cfg) }
