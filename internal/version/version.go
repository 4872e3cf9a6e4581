package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time (Makefile); empty in a plain go build.
var (
	version string
	commit  string
	date    string
)

// Info is what a binary knows of its build.
type Info struct {
	Version   string // git describe (v0.1.0-12-gabcdef1, or the short commit), "dev" when unknown
	Commit    string // full commit hash, "" when unknown
	Date      string // build date (RFC 3339, UTC); with only VCS info, the commit's time
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
}

// Get returns the build's Info.
func Get() Info {
	return get(version, commit, date, debug.ReadBuildInfo)
}

func get(v, c, d string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: v, Commit: c, Date: d, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		var rev, t string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				t = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if in.Commit == "" && rev != "" {
			in.Commit, in.Modified = rev, dirty
			if in.Date == "" {
				in.Date = t
			}
		}
	}
	if in.Version == "" {
		switch {
		case in.Commit != "":
			in.Version = short(in.Commit)
			if in.Modified {
				in.Version += "-dirty"
			}
		default:
			in.Version = "dev"
		}
	}
	return in
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// String is one line for --version: "xlane v0.1.0-3-gabc (commit abc..., built 2026-..., go1.24)".
func (in Info) String() string {
	c := in.Commit
	if c == "" {
		c = "unknown"
	}
	d := in.Date
	if d == "" {
		d = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, built %s, %s)", in.Version, c, d, in.GoVersion)
}
