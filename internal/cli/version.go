package cli

import (
	"runtime"
	"runtime/debug"
	"time"
)

// BuildDate is when the source was committed (RFC 3339, UTC); release
// builds set it with -ldflags, like Version and Commit.
var BuildDate = ""

// buildInfo is what `ctsync version` reports about the binary.
type buildInfo struct {
	version, commit, date, goVersion, platform string
}

// readBuildInfo returns the version, commit and build date set by the
// linker flags (make build, make release) or, where they are unset, the
// revision and commit time Go records for a build in a git checkout
// (go build / go install with VCS stamping on).
func readBuildInfo() buildInfo {
	info, _ := debug.ReadBuildInfo()
	return buildInfoOf(info)
}

// buildInfoOf is readBuildInfo for the build information info (nil: none).
func buildInfoOf(info *debug.BuildInfo) buildInfo {
	b := buildInfo{version: Version, commit: Commit, date: BuildDate,
		goVersion: runtime.Version(), platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info == nil {
		if b.date == "" {
			b.date = "unknown"
		}
		return b
	}
	var rev, at string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if (b.commit == "" || b.commit == "unknown") && rev != "" {
		b.commit = rev
		if dirty {
			b.commit += "-dirty"
		}
	}
	if b.date == "" && at != "" {
		if t, err := time.Parse(time.RFC3339, at); err == nil {
			b.date = t.UTC().Format(time.RFC3339)
		}
	}
	if b.date == "" {
		b.date = "unknown"
	}
	return b
}
