package e2e

// Helpers of the CTS compatibility suite (compat_*_test.go): the
// Terraform-compatible binaries it runs against, the echo test provider,
// ctsync processes with extra environment, and the CTS rendering of a
// service instance, built independently from Consul's own answers.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// compatBinary is one Terraform-compatible CLI the suite runs against.
type compatBinary struct {
	name string // "terraform" or "tofu"
	path string
}

// compatBinaries returns terraform and tofu; scripts/tools.sh provides both.
func compatBinaries(t *testing.T) []compatBinary {
	t.Helper()
	return []compatBinary{
		{"terraform", testutil.Binary(t, "terraform")},
		{"tofu", testutil.Binary(t, "tofu")},
	}
}

var (
	echoOnce   sync.Once
	echoMirror string
	echoErr    error
)

// echoProviderVersion is the version the echo provider is mirrored as.
const echoProviderVersion = "0.1.0"

// compatCLIConfig returns a Terraform CLI configuration file that serves
// the tools mirror (hashicorp/local, hashicorp/time) and the echo test
// provider (ctsync/echo, built from e2e/testdata/compat_echo_provider into
// .tools/compat, rebuilt when its source changes), for both registry hosts
// so that terraform and tofu resolve the same addresses.
func compatCLIConfig(t *testing.T) string {
	t.Helper()
	echoOnce.Do(func() { echoMirror, echoErr = buildEchoProvider() })
	if echoErr != nil {
		t.Fatalf("building the echo test provider: %v", echoErr)
	}
	tools := filepath.Join(testutil.ToolsDir(), "mirror")
	rc := fmt.Sprintf(`provider_installation {
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/ctsync/*", "registry.opentofu.org/ctsync/*"]
  }
  filesystem_mirror {
    path    = %q
    include = ["registry.terraform.io/hashicorp/*", "registry.opentofu.org/hashicorp/*"]
  }
}
disable_checkpoint = true
`, echoMirror, tools)
	return writeFile(t, t.TempDir(), "terraformrc", rc)
}

func buildEchoProvider() (string, error) {
	src := filepath.Join(testutil.RepoRoot(), "e2e", "testdata", "compat_echo_provider")
	h := sha256.New()
	for _, f := range []string{"main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	mirror := filepath.Join(testutil.ToolsDir(), "compat", "echo-"+hex.EncodeToString(h.Sum(nil))[:12])
	plat := runtime.GOOS + "_" + runtime.GOARCH
	file := "terraform-provider-echo_v" + echoProviderVersion
	paths := []string{
		filepath.Join(mirror, "registry.terraform.io", "ctsync", "echo", echoProviderVersion, plat, file),
		filepath.Join(mirror, "registry.opentofu.org", "ctsync", "echo", echoProviderVersion, plat, file),
	}
	if _, err := os.Stat(paths[1]); err == nil {
		return mirror, nil
	}
	// Another process of this package (scripts/e2e-shards.sh runs several)
	// may be building it at the same time: each builds in a folder of its
	// own and renames its copies into place (same content either way).
	if err := os.MkdirAll(mirror, 0o755); err != nil {
		return "", err
	}
	build, err := os.MkdirTemp(mirror, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(build)
	bin := filepath.Join(build, "terraform-provider-echo")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	for i, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		tmp := filepath.Join(build, fmt.Sprintf("copy-%d", i))
		if err := os.WriteFile(tmp, data, 0o755); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, p); err != nil {
			return "", err
		}
	}
	return mirror, nil
}

// startCompat runs `ctsync <args>` in dir like startCtsync, with extra
// environment variables (later entries win over the harness's).
func startCompat(t *testing.T, dir string, extraEnv []string, args ...string) *proc {
	t.Helper()
	return startCtsyncEnv(t, dir, extraEnv, args...)
}

// runs counts the runs ctsync started for a task, by its log lines.
func (p *proc) runs(taskName string) int { return p.countLog("executing task", taskName) }

// successes counts the task's successful runs. A run that failed and was
// retried counts once, when it succeeded.
func (p *proc) successes(taskName string) int { return p.countLog("task completed", taskName) }

func (p *proc) countLog(msg, taskName string) int {
	// hclog's format: "<time> [LEVEL] <name>: <msg>: key=value ...".
	re := regexp.MustCompile(` ` + regexp.QuoteMeta(msg) + `: (.* )?task_name=` + regexp.QuoteMeta(taskName) + `( |$)`)
	n := 0
	for _, l := range strings.Split(p.out.String(), "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

// lines returns the output lines matching all the given substrings, after
// undoing the log format's quoting of '"' (so `task "x".field` matches).
func (p *proc) lines(subs ...string) []string {
	var out []string
next:
	for _, l := range strings.Split(p.out.String(), "\n") {
		l = strings.ReplaceAll(l, `\"`, `"`)
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// readJSON decodes dir/name into v; false while the file is missing or
// half written.
func readJSON(dir, name string, v any) bool {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || len(b) == 0 {
		return false
	}
	return json.Unmarshal(b, v) == nil
}

// waitJSON waits until dir/name decodes into a value equal to want (a
// pointer's target compared with reflect.DeepEqual) and fails with a diff.
func waitJSON[T any](t *testing.T, dir, name string, want T) T {
	t.Helper()
	var got T
	deadline := time.Now().Add(testutil.Scale(60 * time.Second))
	for {
		var v T
		if readJSON(dir, name, &v) {
			got = v
			if reflect.DeepEqual(v, want) {
				return v
			}
		}
		if time.Now().After(deadline) {
			gb, _ := json.MarshalIndent(got, "", "  ")
			wb, _ := json.MarshalIndent(want, "", "  ")
			t.Fatalf("%s: timed out waiting for the expected value\n got: %s\nwant: %s", name, gb, wb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// nodeInfo is what Consul says about the agent's node, as the services
// variable renders it.
type nodeInfo struct {
	name, id, address, dc string
	tagged, meta          map[string]string
}

// agentNode reads the dev agent's node from the catalog.
func agentNode(t *testing.T, c *testutil.Consul) nodeInfo {
	t.Helper()
	var n *api.CatalogNode
	// The agent fills in its node's tagged addresses in its first sync.
	testutil.Eventually(t, 30*time.Second, "the agent's node in the catalog", func() bool {
		var err error
		n, _, err = c.Client.Catalog().Node("node-1", nil)
		return err == nil && n != nil && n.Node != nil && len(n.Node.TaggedAddresses) >= 4
	})
	info := nodeInfo{name: n.Node.Node, id: n.Node.ID, address: n.Node.Address, dc: n.Node.Datacenter,
		tagged: n.Node.TaggedAddresses, meta: n.Node.Meta}
	// What CTS renders for a dev agent: these keys exist, and the ID is the node's UUID.
	for _, k := range []string{"lan", "lan_ipv4", "wan", "wan_ipv4"} {
		if info.tagged[k] == "" {
			t.Fatalf("dev agent node has no tagged address %q: %v", k, info.tagged)
		}
	}
	if _, ok := info.meta["consul-network-segment"]; !ok || len(info.id) != 36 || info.address != "127.0.0.1" || info.dc != "dc1" {
		t.Fatalf("unexpected dev agent node: %+v", info)
	}
	return info
}

// svc is a service instance as the test registers it.
type svc struct {
	id, name, address string
	port              int
	tags              []string
	meta              map[string]string
	status            string // TTL check status; "" registers no check
}

func (s svc) register(t *testing.T, c *testutil.Consul) {
	t.Helper()
	c.RegisterService(t, &api.AgentServiceRegistration{ID: s.id, Name: s.name, Address: s.address, Port: s.port,
		Tags: slices.Clone(s.tags), Meta: s.meta}, s.status)
}

// rendered is the entry CTS renders for s on node n in the services
// variable, with the given aggregated status and task metadata: address
// falls back to the node's, tags are sorted, nil maps are {}.
func (s svc) rendered(n nodeInfo, status string, userMeta map[string]string) task.Service {
	addr := s.address
	if addr == "" {
		addr = n.address
	}
	tags := slices.Clone(s.tags)
	if tags == nil {
		tags = []string{}
	}
	slices.Sort(tags)
	orEmpty := func(m map[string]string) map[string]string {
		if m == nil {
			return map[string]string{}
		}
		return m
	}
	return task.Service{ID: s.id, Name: s.name, Kind: "", Address: addr, Port: s.port, Meta: orEmpty(s.meta),
		Tags: tags, Namespace: "", Status: status, Node: n.name, NodeID: n.id, NodeAddress: n.address,
		NodeDatacenter: n.dc, NodeTaggedAddresses: n.tagged, NodeMeta: n.meta, CTSUserDefinedMeta: orEmpty(userMeta)}
}

// key is the CTS map key of s on node n: id.node.dc (no namespace on OSS).
func (s svc) key(n nodeInfo) string { return s.id + "." + n.name + "." + n.dc }

// ctsServiceFields are the attributes of the CTS services object type, in
// CTS's order.
var ctsServiceFields = []string{"id", "name", "kind", "address", "port", "meta", "tags", "namespace", "status",
	"node", "node_id", "node_address", "node_datacenter", "node_tagged_addresses", "node_meta", "cts_user_defined_meta"}

// checkServices compares the services.json a module wrote with want, key by
// key and field by field, and checks every entry has exactly the CTS
// attributes. It waits (up to a minute) for the file to match.
func checkServices(t *testing.T, dir string, want map[string]task.Service) {
	t.Helper()
	var diffs []string
	deadline := time.Now().Add(testutil.Scale(60 * time.Second))
	for {
		diffs = diffs[:0]
		var raw map[string]map[string]json.RawMessage
		if !readJSON(dir, "services.json", &raw) {
			diffs = append(diffs, "services.json not written yet")
		} else {
			diffs = serviceDiffs(raw, want)
		}
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "services.json"))
			t.Fatalf("services.json differs from what CTS renders:\n  %s\nfile: %s", strings.Join(diffs, "\n  "), b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func serviceDiffs(raw map[string]map[string]json.RawMessage, want map[string]task.Service) []string {
	var diffs []string
	for k := range raw {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("unexpected key %q", k))
		}
	}
	for k, w := range want {
		obj, ok := raw[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("missing key %q", k))
			continue
		}
		var names []string
		for f := range obj {
			names = append(names, f)
		}
		slices.Sort(names)
		wantNames := slices.Clone(ctsServiceFields)
		slices.Sort(wantNames)
		if !slices.Equal(names, wantNames) {
			diffs = append(diffs, fmt.Sprintf("%s: attributes %v, want %v", k, names, wantNames))
			continue
		}
		wb, _ := json.Marshal(w)
		var wantObj map[string]json.RawMessage
		_ = json.Unmarshal(wb, &wantObj)
		for _, f := range ctsServiceFields {
			if !jsonEqual(obj[f], wantObj[f]) {
				diffs = append(diffs, fmt.Sprintf("%s.%s = %s, want %s", k, f, obj[f], wantObj[f]))
			}
		}
	}
	slices.Sort(diffs)
	return diffs
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

// settle waits until every run the task started has finished, so that a
// count taken next is not racing a run's last log line.
func settle(t *testing.T, p *proc, taskName string) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, "the runs of task "+taskName+" to finish", func() bool {
		return p.runs(taskName) == p.successes(taskName)+p.countLog("error applying task", taskName)
	})
}

// waitRuns waits until the task has run at least n times in total.
func waitRuns(t *testing.T, p *proc, taskName string, n int) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d runs of task %s", n, taskName), func() bool {
		return p.runs(taskName) >= n
	})
}

// sha256Hex is the digest the echo provider and the provider fixture report.
func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
