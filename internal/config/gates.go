package config

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/ctsync/ctsync/internal/policy"
	"github.com/ctsync/ctsync/internal/task"
)

// This file decodes a task's safety gates (ctsync extensions, docs/safety.md):
//
//	approval { required, max_destroy, max_destroy_percent, max_replace, window, expire }
//	policy   { files = [...], timeout }
//
// The value rules (ranges) are task.Spec.Validate's, so that a task created
// through the API obeys them too; the policy files are read and compiled
// here, so that a Rego error is a configuration error naming the Rego
// file's line.

// gates decodes the approval and policy blocks of a task.
func (d *decoder) gates(c *content, p string, t *rawTask) {
	if b := d.onlyOne(c, "approval", p); b != nil {
		d.approval(b, join(p, "approval"), t)
	}
	if b := d.onlyOne(c, "policy", p); b != nil {
		d.policy(b, join(p, "policy"), t)
	}
}

func (d *decoder) approval(b *hcl.Block, path string, t *rawTask) {
	c := d.content(b.Body, path, attrs("required", "max_destroy", "max_destroy_percent", "max_replace", "window", "expire"), nil)
	t.recordAll("approval", c)
	a := &task.Approval{Required: d.boolean(c, "required", path).V}
	if n := d.integer(c, "max_destroy", path); n.Set {
		a.MaxDestroy = &n.V
	}
	if n := d.integer(c, "max_destroy_percent", path); n.Set {
		a.MaxDestroyPercent = &n.V
	}
	if n := d.integer(c, "max_replace", path); n.Set {
		a.MaxReplace = &n.V
	}
	if w := d.duration(c, "window", path); w.Set {
		// The API's rule too (task.CheckWindow).
		if err := task.CheckWindow(w.V); err != nil {
			d.errf(w.Rng, join(path, "window"), "%v", err)
		} else {
			v := task.Duration(w.V)
			a.Window = &v
		}
	}
	if e := d.duration(c, "expire", path); e.Set {
		// The API's rule too (task.ParseExpire).
		if err := task.CheckExpire(e.V); err != nil {
			d.errf(e.Rng, join(path, "expire"), "%v", err)
		} else {
			a.Expire = task.Duration(e.V)
		}
	}
	t.spec.Approval = a
}

func (d *decoder) policy(b *hcl.Block, path string, t *rawTask) {
	c := d.content(b.Body, path, attrs("files", "timeout"), nil)
	t.recordAll("policy", c)
	timeout := d.duration(c, "timeout", path)
	if timeout.Set {
		if err := task.CheckPolicyTimeout(timeout.V); err != nil {
			d.errf(timeout.Rng, join(path, "timeout"), "%v", err)
			timeout.V = 0
		}
	}
	files, elems := d.strList(c, "files", path)
	t.recordList("policy.files", elems)
	if !files.Set {
		if c.attr("files") == nil {
			d.errf(c.missing, join(path, "files"), `is required: the Rego files to evaluate on every plan (e.g. ["policies/fw.rego"])`)
		}
		return
	}
	t.spec.Policy = &task.Policy{Files: files.V, Timeout: task.Duration(timeout.V)}
	rangeOf := func(i int) hcl.Range {
		if i < len(elems) {
			return elems[i]
		}
		return files.Rng
	}
	readable := true
	for i, f := range files.V {
		field := fmt.Sprintf("%s.files[%d]", path, i)
		if f == "" {
			readable = false // task.Spec.Validate reports it
			continue
		}
		if err := checkReadable(f); err != nil {
			d.errf(rangeOf(i), field, "policy file %q: %v", f, err)
			readable = false
		}
	}
	if !readable || len(files.V) == 0 {
		return
	}
	// Parse and compile (by the policy helper, ctsync-policy): an error is
	// reported where the Rego file has it, under the field that names the
	// file.
	err := policy.Check(files.V)
	var pes policy.Errors
	if err != nil && !errors.As(err, &pes) {
		// The helper is missing or failing: the task's policy could
		// never be evaluated, so the configuration is refused.
		d.errf(files.Rng, join(path, "files"), "%v", err)
		return
	}
	for _, pe := range pes {
		i := max(0, slices.Index(files.V, pe.File))
		field := fmt.Sprintf("%s.files[%d]", path, i)
		if pe.Line == 0 {
			d.errf(rangeOf(i), field, "%s", pe.Error())
			continue
		}
		pos := hcl.Pos{Line: pe.Line, Column: pe.Col}
		d.errf(hcl.Range{Filename: pe.File, Start: pos, End: pos}, field, "%s (the policy file listed at %s)", pe.Msg, posString(rangeOf(i)))
	}
}

// checkReadable reports a path that is not a regular file ctsync can read.
func checkReadable(name string) error {
	fi, err := os.Stat(name)
	if err != nil {
		return errors.New(pathErr(err))
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	f, err := os.Open(name)
	if err != nil {
		return errors.New(pathErr(err))
	}
	return f.Close()
}
