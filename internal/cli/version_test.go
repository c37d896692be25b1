package cli

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// `ctsync version` reports what the linker flags stamped (make build,
// make release): version, commit, build date and the Go toolchain.
func TestVersionFromLinkerFlags(t *testing.T) {
	oldV, oldC, oldD := Version, Commit, BuildDate
	t.Cleanup(func() { Version, Commit, BuildDate = oldV, oldC, oldD })
	Version, Commit, BuildDate = "1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-01-02T03:04:05Z"

	_, out, _ := run(t, "", "version")
	for _, want := range []string{
		"ctsync v1.2.3 (0123456789abcdef0123456789abcdef01234567)\n",
		"Build date: 2026-01-02T03:04:05Z\n",
		"Go: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

// Without linker flags (go build, go install in a git checkout), the
// commit and date come from the VCS stamp Go records in the binary; a
// build from modified sources says so.
func TestVersionFromBuildInfo(t *testing.T) {
	oldV, oldC, oldD := Version, Commit, BuildDate
	t.Cleanup(func() { Version, Commit, BuildDate = oldV, oldC, oldD })
	Version, Commit, BuildDate = "0.1.0-dev", "unknown", ""
	const rev = "80cd67597e44a750ddf15b835afe26f8bd5fd884"
	stamp := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-11-26T04:35:30Z"}, {Key: "vcs.modified", Value: modified}}}
	}
	if b := buildInfoOf(stamp("false")); b.commit != rev || b.date != "2026-11-26T04:35:30Z" || b.version != "0.1.0-dev" {
		t.Errorf("from the VCS stamp: %+v", b)
	}
	if b := buildInfoOf(stamp("true")); b.commit != rev+"-dirty" {
		t.Errorf("modified sources: commit %q, want %s-dirty", b.commit, rev)
	}
	// No stamp (-buildvcs=false, a git worktree, a source tarball).
	if b := buildInfoOf(&debug.BuildInfo{}); b.commit != "unknown" || b.date != "unknown" {
		t.Errorf("without a stamp: %+v", b)
	}
	if b := buildInfoOf(nil); b.commit != "unknown" || b.date != "unknown" {
		t.Errorf("without build information: %+v", b)
	}
	// The linker flags win over the stamp.
	Commit, BuildDate = "0123456789abcdef0123456789abcdef01234567", "2026-01-02T03:04:05Z"
	if b := buildInfoOf(stamp("true")); b.commit != Commit || b.date != BuildDate {
		t.Errorf("linker flags and a stamp: %+v", b)
	}
}

// CTS's deprecated form without a command prints the version when a
// version flag comes among the leading flags, and nothing else runs.
func TestVersionWithoutCommand(t *testing.T) {
	for _, args := range [][]string{{"-once", "-v"}, {"-config-file=x.hcl", "-version"}, {"-inspect", "--version", "-config-file=x.hcl"}} {
		code, out, errOut := run(t, "", args...)
		if code != ExitOK || !strings.HasPrefix(out, "ctsync v") || errOut != "" {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	// After a value that is not a flag, -version is start's (an unknown
	// flag), as in CTS.
	if code, _, _ := run(t, "", "-config-file", "x.hcl", "-version"); code != ExitFlagParse {
		t.Errorf("-config-file x.hcl -version: exit %d, want %d", code, ExitFlagParse)
	}
}
