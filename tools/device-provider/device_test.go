package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

func TestDeviceObjectLifecycle(t *testing.T) {
	dir := t.TempDir()
	d := &device{dir: dir}
	ctx := context.Background()

	if _, err := d.read(ctx, "web-1"); !errors.Is(err, errGone) {
		t.Fatalf("read of a missing object: got %v, want errGone", err)
	}
	if err := d.write(ctx, "web-1", "10.0.0.1:80"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "web-1"))
	if err != nil || string(b) != "10.0.0.1:80" {
		t.Fatalf("file after write: %q, %v", b, err)
	}
	// An out-of-band edit is what the next read sees.
	if err := os.WriteFile(filepath.Join(dir, "web-1"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := d.read(ctx, "web-1"); err != nil || v != "changed" {
		t.Fatalf("read after an out-of-band edit: %q, %v", v, err)
	}
	if err := d.update(ctx, "web-1", "updated"); err != nil {
		t.Fatalf("update: %v", err)
	}
	if v, err := d.read(ctx, "web-1"); err != nil || v != "updated" {
		t.Fatalf("read after update: %q, %v", v, err)
	}
	if err := d.remove(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	// An update of an object deleted meanwhile fails, as on a device.
	if err := d.update(ctx, "web-1", "again"); !errors.Is(err, errGone) {
		t.Fatalf("update of a deleted object: got %v, want errGone", err)
	}
	if err := d.remove(ctx, "web-1"); err != nil {
		t.Fatalf("removing an object already gone: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("dir not empty after delete (temporary files left?): %v", ents)
	}
}

func TestDeviceDelays(t *testing.T) {
	d := &device{dir: t.TempDir(), readDelay: 60 * time.Millisecond, writeDelay: 120 * time.Millisecond}
	ctx := context.Background()
	start := time.Now()
	if err := d.write(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 120*time.Millisecond {
		t.Fatalf("write took %v, want at least write_delay", el)
	}
	start = time.Now()
	if _, err := d.read(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Fatalf("read took %v, want at least read_delay", el)
	}
	// A cancelled call stops waiting and changes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := d.remove(cctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("remove with a cancelled context: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "a")); err != nil {
		t.Fatalf("object removed despite the cancellation: %v", err)
	}
}

func TestDeviceRefusesPaths(t *testing.T) {
	d := &device{dir: t.TempDir()}
	for _, name := range []string{"", ".", "..", "../x", "a/b"} {
		if err := d.write(context.Background(), name, "v"); err == nil {
			t.Errorf("write of %q: no error", name)
		}
	}
}

func TestParseDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{"50ms": 50 * time.Millisecond, "0": 0, "1s": time.Second} {
		if got, err := parseDelay(types.StringValue(in)); err != nil || got != want {
			t.Errorf("parseDelay(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if got, err := parseDelay(types.StringNull()); err != nil || got != 0 {
		t.Errorf("null: %v, %v", got, err)
	}
	for _, bad := range []string{"fast", "-1s", "10"} {
		if _, err := parseDelay(types.StringValue(bad)); err == nil {
			t.Errorf("parseDelay(%q): no error", bad)
		}
	}
}
