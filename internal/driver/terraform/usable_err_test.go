package terraform

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// panicErr stands for terraform-exec's error of a cancelled command that
// exited 0: Is works, Error panics.
type panicErr struct{ inner error }

func (e panicErr) Error() string        { return e.inner.Error() }
func (e panicErr) Is(target error) bool { return target == context.Canceled }

func TestUsableErr(t *testing.T) {
	if usableErr(nil) != nil {
		t.Fatal("nil")
	}
	plain := errors.New("exit status 1")
	if usableErr(plain) != plain {
		t.Fatal("a usable error was replaced")
	}
	err := usableErr(panicErr{})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped after an interrupt") {
		t.Fatalf("got %v", err)
	}
}
