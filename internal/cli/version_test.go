package cli

import (
	"runtime"
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
