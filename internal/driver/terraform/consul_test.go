package terraform

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/task"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The default backend keeps the task's state in Consul at the CTS key, and
// the Consul token never lands in a file.
func TestDefaultConsulBackend(t *testing.T) {
	bin := needTerraform(t)
	consul := testutil.StartConsul(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	const token = "ctsync-test-token-5f0d" // ACLs are off in a dev agent: accepted, unused

	src := writeModule(t, dir, "mod", map[string]string{"main.tf": builtinModule})
	o := Options{
		Spec:    task.Spec{Name: "consul-task", Module: src, Condition: servicesCondition("web")},
		WorkDir: filepath.Join(dir, "consul-task"),
		Binary:  bin,
		Consul:  config.Consul{Address: "http://" + consul.Addr, KVPath: "consul-terraform-sync/", Token: token},
	}
	d := mustNew(t, o)
	res, err := d.Apply(ctx, run("a1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Add != 1 {
		t.Fatalf("apply: %+v", res)
	}

	const key = "consul-terraform-sync/terraform-env:consul-task"
	pair, _, err := consul.Client.KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil || len(pair.Value) == 0 {
		keys, _, _ := consul.Client.KV().Keys("", "", nil)
		t.Fatalf("no state at %s; keys: %v", key, keys)
	}
	// gzip = true: the state is stored compressed.
	if len(pair.Value) < 2 || pair.Value[0] != 0x1f || pair.Value[1] != 0x8b {
		t.Fatalf("state at %s is not gzip-compressed", key)
	}

	// A fresh driver (e.g. after a restart) sees the same state: no changes.
	d = mustNew(t, o)
	res, err = d.Plan(ctx, run("p1"), services("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Changes {
		t.Fatalf("plan after apply: %+v\n%s", res, res.Output)
	}

	err = filepath.WalkDir(d.WorkDir(), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if strings.Contains(p, string(filepath.Separator)+"providers"+string(filepath.Separator)) {
			return nil // provider binaries
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), token) {
			t.Errorf("the Consul token is written in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	res, err = d.Destroy(ctx, run("d1"))
	if err != nil || res.Destroy != 1 {
		t.Fatalf("destroy: %+v %v", res, err)
	}
}
