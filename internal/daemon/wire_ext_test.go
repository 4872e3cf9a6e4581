package daemon_test

import (
	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/daemon/daemontest"
)

func init() {
	daemon.StartForTest = daemontest.Start
	daemon.FeaturesForTest = daemontest.Features
}
