package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// device is the stand-in for a network device: each object is a file in
// dir, named exactly as the object, holding its value. Every call waits
// its delay first (reads readDelay, writes and deletes writeDelay), as a
// device's API would take time to answer.
type device struct {
	dir        string
	readDelay  time.Duration
	writeDelay time.Duration
}

// errGone is returned by read when the object's file does not exist.
var errGone = errors.New("object not found")

// checkName refuses names that are not a single file name in dir.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a file name", name)
	case strings.ContainsAny(name, "/\x00") || strings.ContainsRune(name, filepath.Separator):
		return fmt.Errorf("%q must be a file name, without a path separator", name)
	}
	return nil
}

func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *device) path(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", fmt.Errorf("object name: %w", err)
	}
	return filepath.Join(d.dir, name), nil
}

// read returns the object's value, or errGone when its file is missing.
func (d *device) read(ctx context.Context, name string) (string, error) {
	p, err := d.path(name)
	if err != nil {
		return "", err
	}
	if err := wait(ctx, d.readDelay); err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", errGone
	}
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// write creates or replaces the object's file with value. The file is
// written beside it under a dot-prefixed temporary name and renamed, so a
// reader never sees half a value.
func (d *device) write(ctx context.Context, name, value string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := wait(ctx, d.writeDelay); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.dir, ".device-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// update replaces the value of an existing object. Like a device's API, it
// refuses an object that is not there (deleted outside Terraform): errGone.
func (d *device) update(ctx context.Context, name, value string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := wait(ctx, d.writeDelay); err != nil {
			return err
		}
		return fmt.Errorf("%w: %q was deleted outside Terraform", errGone, name)
	}
	return d.write(ctx, name, value)
}

// remove deletes the object's file; an object already gone is not an error.
func (d *device) remove(ctx context.Context, name string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := wait(ctx, d.writeDelay); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
