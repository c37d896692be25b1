package terraform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ctsync/ctsync/internal/config"
	"github.com/ctsync/ctsync/internal/driver"
	"github.com/ctsync/ctsync/internal/testutil"
)

// The machine-readable UI is read line by line whatever the chunks it
// arrives in: its messages become the text of the run log, diagnostics
// are laid out as Terraform's text output, the change summaries and the
// diagnostics are kept.
func TestMachineUI(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	s.attach(f)
	s.beginUI("apply")
	ui := `{"@level":"info","@message":"Terraform 1.11.4","type":"version","terraform":"1.11.4","ui":"1.2"}
{"@level":"info","@message":"terraform_data.s: Plan to create","type":"planned_change","change":{"action":"create"}}
{"@level":"info","@message":"Plan: 1 to add, 0 to change, 0 to destroy.","type":"change_summary","changes":{"add":1,"change":0,"import":0,"remove":0,"operation":"plan"}}
{"@level":"warn","@message":"Warning: Deprecated","type":"diagnostic","diagnostic":{"severity":"warning","summary":"Deprecated","detail":"old"}}
{"@level":"error","@message":"Error: Resource precondition failed","type":"diagnostic","diagnostic":{"severity":"error","summary":"Resource precondition failed","detail":"A service named bad\nis not allowed.\n\nmore","range":{"filename":"../mod/main.tf","start":{"line":11,"column":7,"byte":0},"end":{"line":11,"column":9,"byte":0}},"snippet":{"context":"resource \"terraform_data\" \"s\"","code":"      condition = x","start_line":11,"highlight_start_offset":0,"highlight_end_offset":1,"values":[]}}}
not json
{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"import":0,"remove":0,"operation":"apply"}}`
	w := s.writer("stdout")
	for len(ui) > 0 { // in chunks that cut lines
		n := min(37, len(ui))
		_, _ = w.Write([]byte(ui[:n]))
		ui = ui[n:]
	}
	diags, changes, ok := s.report()
	if !ok || len(diags) != 2 || changes["plan"].Add != 1 || changes["apply"].Add != 1 || s.plannedAt().IsZero() {
		t.Fatalf("report: %+v %+v %v", diags, changes, ok)
	}
	if got := diags.Summary(); got != "Error: Resource precondition failed: A service named bad is not allowed." {
		t.Fatalf("summary %q", got)
	}
	if got := diags.Headline(); got != "Error: Resource precondition failed: A service named bad is not allowed." {
		t.Fatalf("headline %q: a failed condition keeps its author's message", got)
	}
	out, _ := s.output()
	for _, want := range []string{"Terraform 1.11.4\n", "Plan: 1 to add", "\nError: Resource precondition failed\n\n  on ../mod/main.tf line 11, in resource \"terraform_data\" \"s\":\n  11:       condition = x\n\nA service named bad\nis not allowed.\n",
		"Warning: Deprecated", "not json\n", "Apply complete! Resources: 1 added"} {
		if !strings.Contains(out, want) {
			t.Fatalf("text lacks %q:\n%s", want, out)
		}
	}
	if err := s.detach(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(f.Name())
	if !strings.Contains(string(b), "Apply complete!") || strings.Contains(string(b), `"@message"`) {
		t.Fatalf("run log:\n%s", b)
	}
}

// The consul backend's lock error as the machine-readable UI carries it
// (the Lock Info block inside the summary) is a locked state with its
// holder, reported by its first line.
func TestFailStateLockedMachineUI(t *testing.T) {
	d := &Driver{sink: &sink{}}
	d.sink.attach(nil)
	d.sink.beginUI("apply")
	_, _ = d.sink.writer("stdout").Write([]byte(`{"@level":"error","@message":"Error: error loading state: failed to lock state in Consul: Lock Info:\n  ID:        abc\n  Who:       operator@bastion\n","type":"diagnostic","diagnostic":{"severity":"error","summary":"error loading state: failed to lock state in Consul: Lock Info:\n  ID:        abc\n  Who:       operator@bastion\n","detail":""}}` + "\n"))
	err := d.fail("apply", &exec.ExitError{})
	if !errors.Is(err, driver.ErrStateLocked) {
		t.Fatalf("%v does not wrap ErrStateLocked", err)
	}
	want := "apply: the Terraform state is locked by another process (held by operator@bastion, lock ID abc); " +
		"Error: error loading state: failed to lock state in Consul"
	if err.Error() != want {
		t.Fatalf("got  %q\nwant %q", err.Error(), want)
	}
}

// versionStub is a terraform of the given version whose apply fails when
// the inputs hold "fail"; a -json flag is refused unless the version has
// the machine-readable UI.
func versionStub(ver string, ui bool) string {
	s := "#!/bin/sh\ncase \"$1\" in\nversion) echo '{\"terraform_version\":\"" + ver + "\",\"platform\":\"linux_amd64\",\"provider_selections\":{}}' ;;\n"
	if ui {
		return s + `apply)
  if grep -q fail terraform.tfvars; then
    echo '{"@message":"Plan: 2 to add, 0 to change, 0 to destroy.","type":"change_summary","changes":{"add":2,"change":0,"remove":0,"operation":"plan"}}'
    echo '{"@message":"Error: Unsupported argument","type":"diagnostic","diagnostic":{"severity":"error","summary":"Unsupported argument","detail":"not expected here"}}'
    exit 1
  fi
  echo '{"@message":"Apply complete! Resources: 2 added, 1 changed, 0 destroyed.","type":"change_summary","changes":{"add":2,"change":1,"remove":0,"operation":"apply"}}' ;;
destroy) echo '{"@message":"Destroy complete! Resources: 3 destroyed.","type":"change_summary","changes":{"add":0,"change":0,"remove":3,"operation":"destroy"}}' ;;
esac
exit 0
`
	}
	return s + `apply|destroy)
  for a; do [ "$a" = -json ] && { echo 'flag provided but not defined: -json' >&2; exit 1; }; done
  if [ "$1" = destroy ]; then echo 'Destroy complete! Resources: 3 destroyed.'; exit 0; fi
  if grep -q fail terraform.tfvars; then
    echo 'Plan: 2 to add, 0 to change, 0 to destroy.'
    printf 'Error: Unsupported argument\n\n  on main.tf line 3:\n\nnot expected here\n' >&2
    exit 1
  fi
  echo 'Apply complete! Resources: 2 added, 1 changed, 0 destroyed.' ;;
esac
exit 0
`
}

// Terraform from 0.15.3 is read from its machine-readable UI, older ones
// from their text: both give the same counts and the same error.
func TestMachineUIOrText(t *testing.T) {
	for _, tc := range []struct {
		ver string
		ui  bool
	}{{"0.15.2", false}, {"0.15.3", true}, {"1.11.4", true}} {
		t.Run(tc.ver, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "terraform")
			if err := os.WriteFile(bin, []byte(versionStub(tc.ver, tc.ui)), 0o755); err != nil {
				t.Fatal(err)
			}
			o := localTask(t, dir, "v", bin)
			o.Driver = config.TerraformDriver{Backend: o.Driver.Backend}
			d := mustNew(t, o)
			ctx := testCtx(t)
			res, err := d.Apply(ctx, run("ok"), services("web"))
			if err != nil || d.ui != tc.ui || res.Add != 2 || res.Change != 1 || !res.Changes {
				t.Fatalf("apply: %+v %v (ui %v)", res, err, d.ui)
			}
			res, err = d.Destroy(ctx, run("destroy"))
			if err != nil || res.Destroy != 3 || !res.Changes {
				t.Fatalf("destroy: %+v %v", res, err)
			}
			res, err = d.Apply(ctx, run("bad"), services("fail"))
			var de *driver.Error
			if !errors.As(err, &de) || de.Summary != "Error: Unsupported argument: not expected here" ||
				de.Headline != "Error: Unsupported argument: not expected here" || !de.Terminal || res.Add != 2 {
				t.Fatalf("failed apply: %+v %#v", res, err)
			}
		})
	}
}

// interruptStub is a terraform whose apply waits for an interrupt: then it
// either finishes (prints its closing summary and exits 0, as Terraform
// does when the interrupt comes while it saves the state) or stops (exit
// 1). It touches started once it waits.
func interruptStub(ui, finish bool) string {
	done := `echo 'Apply complete! Resources: 1 added, 0 changed, 0 destroyed.'; exit 0`
	stop := `echo 'Error: execution halted' >&2; exit 1`
	if ui {
		done = `echo '{"@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"remove":0,"operation":"apply"}}'; exit 0`
		stop = `echo '{"@message":"Error: execution halted","type":"diagnostic","diagnostic":{"severity":"error","summary":"execution halted","detail":""}}'; exit 1`
	}
	on := stop
	if finish {
		on = done
	}
	ver := "0.15.2"
	if ui {
		ver = "1.11.4"
	}
	return "#!/bin/sh\ncase \"$1\" in\nversion) echo '{\"terraform_version\":\"" + ver + "\",\"platform\":\"linux_amd64\",\"provider_selections\":{}}' ;;\n" +
		"apply)\n  trap '" + strings.ReplaceAll(on, "'", `'\''`) + "' INT\n  touch started\n  while :; do sleep 0.05; done ;;\nesac\nexit 0\n"
}

// An apply interrupted (a step-down, a shutdown) after Terraform had
// finished it, so that it still printed its closing summary and exited 0,
// has applied; one that Terraform stopped has not.
func TestInterruptAfterFinish(t *testing.T) {
	for _, ui := range []bool{false, true} {
		for _, finish := range []bool{true, false} {
			t.Run(fmt.Sprintf("ui=%v/finish=%v", ui, finish), func(t *testing.T) {
				dir := t.TempDir()
				bin := filepath.Join(dir, "terraform")
				if err := os.WriteFile(bin, []byte(interruptStub(ui, finish)), 0o755); err != nil {
					t.Fatal(err)
				}
				o := localTask(t, dir, "v", bin)
				o.Driver = config.TerraformDriver{Backend: o.Driver.Backend}
				d := mustNew(t, o)
				ctx, cancel := context.WithCancel(testCtx(t))
				defer cancel()
				type out struct {
					res driver.Result
					err error
				}
				done := make(chan out, 1)
				go func() {
					res, err := d.Apply(ctx, run("r"), services("web"))
					done <- out{res, err}
				}()
				testutil.Eventually(t, 30*time.Second, "terraform applies", func() bool {
					return fileExists(filepath.Join(d.WorkDir(), "started"))
				})
				cancel()
				r := <-done
				if finish {
					if r.err != nil || r.res.Add != 1 || !r.res.Changes {
						t.Fatalf("apply finished after the interrupt: %+v %v", r.res, r.err)
					}
					b, _ := os.ReadFile(r.res.LogPath)
					if !strings.Contains(string(b), "the run has applied") {
						t.Fatalf("run log:\n%s", b)
					}
					return
				}
				if r.err == nil {
					t.Fatalf("apply stopped by the interrupt is reported applied: %+v", r.res)
				}
			})
		}
	}
}
