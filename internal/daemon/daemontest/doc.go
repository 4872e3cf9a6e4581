// Package daemontest starts a daemon for tests as cmd/xlaned does
// (cmd/xlaned/features.go): daemon.Open, each feature made with the core
// and registered (Features), daemon.Start. internal/daemon's own tests
// reach it through daemon.StartForTest and daemon.FeaturesForTest.
package daemontest
