// Package coretest is a core.Core for feature packages' tests: a private
// store, the datapath the test gives (a datapathtest.Fake, usually), a
// discarding logger and fault points a test can fail. The network and
// endpoint operations, which need the daemon, are refused.
package coretest
