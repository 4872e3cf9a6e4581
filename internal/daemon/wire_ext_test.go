package daemon_test

import (
	"context"

	"github.com/xlane-dev/xlane/internal/daemon"
	"github.com/xlane-dev/xlane/internal/xlaned"
)

func init() {
	daemon.StartForTest = func(cfg daemon.Config) (*daemon.Daemon, error) {
		return xlaned.Start(context.Background(), cfg)
	}
	daemon.FeaturesForTest = xlaned.Features
}
