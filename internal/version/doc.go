// Package version is the build's identity: the release (git describe), the
// commit and the build date, stamped by the Makefile with
//
//	-ldflags "-X github.com/xlane-dev/xlane/internal/version.version=... -X ...commit=... -X ...date=..."
//
// and, where a plain `go build` left them empty, read from the VCS
// information the Go toolchain embeds (runtime/debug.ReadBuildInfo: the
// commit, its time and whether the tree was modified).
package version
