package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// DeviceProviderVersion is the version scripts/tools.sh mirrors
// tools/device-provider as (ctsync/device).
const DeviceProviderVersion = "0.1.0"

var deviceBuild struct {
	sync.Mutex
	dirs map[string]string // source digest -> mirror
}

// DeviceMirror returns a filesystem mirror holding the device test
// provider (ctsync/device DeviceProviderVersion) built from this
// checkout's tools/device-provider: the tools mirror when make tools built
// it from the same source (scripts/tools.sh keeps the source's digest in
// .tools/build/device-provider.sum), else a mirror of its own in the
// system's temporary directory, built once per source digest (go build, so
// later builds come from Go's cache). A test of the provider's behaviour
// thus never runs an older build of it.
func DeviceMirror(t testing.TB) string {
	t.Helper()
	src := filepath.Join(RepoRoot(), "tools", "device-provider")
	sum, err := deviceSourceDigest(src)
	if err != nil {
		t.Fatalf("device provider source: %v", err)
	}
	tools := ToolsDir()
	plat := runtime.GOOS + "_" + runtime.GOARCH
	file := "terraform-provider-device_v" + DeviceProviderVersion
	rel := filepath.Join("registry.terraform.io", "ctsync", "device", DeviceProviderVersion, plat, file)
	if b, err := os.ReadFile(filepath.Join(tools, "build", "device-provider.sum")); err == nil && strings.TrimSpace(string(b)) == sum {
		if _, err := os.Stat(filepath.Join(tools, "mirror", rel)); err == nil {
			return filepath.Join(tools, "mirror")
		}
	}
	deviceBuild.Lock()
	defer deviceBuild.Unlock()
	if d, ok := deviceBuild.dirs[sum]; ok {
		return d
	}
	dir := filepath.Join(os.TempDir(), "ctsync-device-mirror-"+sum[:16])
	bin := filepath.Join(dir, rel)
	if _, err := os.Stat(bin); err != nil {
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
		cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, ".")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the device provider: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, bin); err != nil { // another process may have built it too: same content
			t.Fatal(err)
		}
	}
	if deviceBuild.dirs == nil {
		deviceBuild.dirs = map[string]string{}
	}
	deviceBuild.dirs[sum] = dir
	return dir
}

// DeviceCLIConfig writes, in dir, a Terraform CLI configuration that
// installs ctsync/device from DeviceMirror and the hashicorp providers from
// the tools mirror, and returns its path.
func DeviceCLIConfig(t testing.TB, dir string) string {
	t.Helper()
	dev := DeviceMirror(t)
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/ctsync/device"]
  }
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/hashicorp/*"]
  }
}
disable_checkpoint = true
`, dev, filepath.Join(ToolsDir(), "mirror"))
	p := filepath.Join(dir, "terraformrc-device")
	if err := os.WriteFile(p, []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// deviceSourceDigest is scripts/tools.sh's digest of the provider's
// source: go.mod, go.sum and the non-test Go files, in name order.
func deviceSourceDigest(src string) (string, error) {
	files, err := filepath.Glob(filepath.Join(src, "*.go"))
	if err != nil {
		return "", err
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	slices.Sort(files)
	h := sha256.New()
	for _, f := range append([]string{filepath.Join(src, "go.mod"), filepath.Join(src, "go.sum")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
