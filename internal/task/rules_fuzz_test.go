package task

import (
	"errors"
	"strings"
	"testing"

	"github.com/ctsync/ctsync/internal/depth"
)

// TestCheckVariableDepth: a value nesting deeper than depth.Max is
// refused before the HCL parser sees it (issue 35: 65,000 `[` overflowed
// the parser's stack and killed the daemon; 20,000 were accepted and then
// failed every run).
func TestCheckVariableDepth(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	if err := CheckVariable("x", deep(depth.Max)); err != nil {
		t.Fatalf("%d levels refused: %v", depth.Max, err)
	}
	for _, v := range []string{deep(depth.Max + 1), deep(20000), strings.Repeat("[", 65000), `{a = "${` + strings.Repeat("(", 30000) + `}"}`} {
		if err := CheckVariable("x", v); err == nil || !strings.Contains(err.Error(), "nests deeper than 64 levels") {
			t.Fatalf("%.20s... (%d bytes): %v, want the depth error", v, len(v), err)
		}
	}
	s := Spec{Name: "t", Module: "m", Variables: map[string]string{"deep": strings.Repeat("[", 65000)},
		Condition: Condition{Services: &ServicesCondition{ServicesSelector: ServicesSelector{Names: []string{"a"}}}}}
	var fe *FieldError
	if err := s.Validate(); !errors.As(err, &fe) || fe.Field != "variables.deep" {
		t.Fatalf("Validate: %v, want an error on variables.deep", err)
	}
}

// FuzzCheckVariable checks arbitrary variable values: never a panic or a
// stack overflow. The seed corpus (testdata/fuzz/FuzzCheckVariable) holds
// the value of issue 35 that overflowed the parser's stack.
func FuzzCheckVariable(f *testing.F) {
	for _, v := range []string{`"x"`, `5`, `["x", 1]`, `{ k = "v", n = [true] }`, `"${x}"`, "<<EOT\na\nEOT\n"} {
		f.Add("v", v)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		_ = CheckVariable(name, value)
	})
}
