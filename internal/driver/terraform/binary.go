package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
)

// MinVersion is the oldest Terraform (or OpenTofu) accepted. There is no
// upper bound: newer releases are expected to keep the CLI contract we use.
var MinVersion = version.Must(version.NewVersion(minVersion))

// minVersion is MinVersion as text, written once (see requiredVersion).
const minVersion = "0.14.0"

// binaryNames are looked up, in order, in a configured directory or on PATH.
var binaryNames = []string{"terraform", "tofu"}

// Binary describes a Terraform or OpenTofu executable.
type Binary struct {
	Path     string
	Version  *version.Version
	OpenTofu bool
}

// FindBinary locates the Terraform/OpenTofu executable and checks its
// version. path comes from `driver "terraform" { path }`: a directory (in
// which terraform, then tofu, is looked for), the executable itself, or empty
// to search PATH for terraform, then tofu.
func FindBinary(path string) (bin string, ver *version.Version, err error) {
	b, err := DetectBinary(path)
	if err != nil {
		return "", nil, err
	}
	return b.Path, b.Version, nil
}

// DetectBinary is FindBinary that also reports whether the binary is OpenTofu.
func DetectBinary(path string) (Binary, error) {
	bin, err := locate(path)
	if err != nil {
		return Binary{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ver, tofu, err := binaryVersion(ctx, bin)
	if err != nil {
		return Binary{}, err
	}
	if ver.Core().LessThan(MinVersion) {
		name := "Terraform"
		if tofu {
			name = "OpenTofu"
		}
		return Binary{}, fmt.Errorf("%s %s at %s is too old: ctsync needs version %s or newer; install a newer release or point driver \"terraform\" { path } at one", name, ver, bin, MinVersion)
	}
	return Binary{Path: bin, Version: ver, OpenTofu: tofu}, nil
}

func locate(path string) (string, error) {
	if path == "" {
		for _, n := range binaryNames {
			if p, err := exec.LookPath(n); err == nil {
				return absPath(p)
			}
		}
		return "", fmt.Errorf("neither terraform nor tofu was found on PATH; install Terraform or OpenTofu (%s or newer) or set driver \"terraform\" { path }", MinVersion)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("terraform path %q: %w", path, err)
	}
	if !st.IsDir() {
		if !isExecutable(st) {
			return "", fmt.Errorf("terraform path %q is not an executable file", path)
		}
		return absPath(path)
	}
	for _, n := range binaryNames {
		p := filepath.Join(path, n)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && isExecutable(st) {
			return absPath(p)
		}
	}
	return "", fmt.Errorf("no terraform or tofu executable in directory %q", path)
}

func isExecutable(st os.FileInfo) bool { return st.Mode().Perm()&0o111 != 0 }

func absPath(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return a, nil
}

var plainVersionRE = regexp.MustCompile(`(?m)^(Terraform|OpenTofu) v(\S+)`)

// binaryVersion asks the binary for its version: `version -json` first (both
// Terraform >= 0.13 and OpenTofu answer it), then the plain text form, whose
// first line also names the product.
func binaryVersion(ctx context.Context, bin string) (*version.Version, bool, error) {
	plain, plainErr := runVersion(ctx, bin)
	tofu := false
	var plainVer string
	if plainErr == nil {
		if m := plainVersionRE.FindStringSubmatch(plain); m != nil {
			tofu = m[1] == "OpenTofu"
			plainVer = m[2]
		}
	}
	if out, err := runVersion(ctx, bin, "-json"); err == nil {
		var v struct {
			Version string `json:"terraform_version"`
		}
		if json.Unmarshal([]byte(out), &v) == nil && v.Version != "" {
			ver, err := version.NewVersion(v.Version)
			if err != nil {
				return nil, false, fmt.Errorf("%s reports an unreadable version %q: %w", bin, v.Version, err)
			}
			return ver, tofu, nil
		}
	}
	if plainErr != nil {
		return nil, false, fmt.Errorf("running %s version: %w", bin, plainErr)
	}
	if plainVer == "" {
		return nil, false, fmt.Errorf("%s version: cannot find a version in %q", bin, firstLine(plain))
	}
	ver, err := version.NewVersion(plainVer)
	if err != nil {
		return nil, false, fmt.Errorf("%s reports an unreadable version %q: %w", bin, plainVer, err)
	}
	return ver, tofu, nil
}

func runVersion(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"version"}, args...)...)
	// No call home for the "outdated" notice, and no stray CLI config warnings
	// in what we parse (warnings go to stderr).
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && stderr.Len() > 0 {
			return "", fmt.Errorf("%w: %s", err, firstLine(stderr.String()))
		}
		return "", err
	}
	return stdout.String(), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
