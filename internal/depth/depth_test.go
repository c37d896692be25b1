package depth

import (
	"errors"
	"strings"
	"testing"
)

func TestHCL(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, c := range []struct {
		name, src string
		ok        bool
		line, col int
	}{
		{"flat", `a = 1`, true, 0, 0},
		{"at the limit", `a = ` + deep(Max), true, 0, 0},
		{"one past the limit", `a = ` + deep(Max+1), false, 1, 5 + Max},
		{"the crash of issue 35", strings.Repeat("[", 65000), false, 1, 1 + Max},
		{"unbalanced closers", strings.Repeat("]", 1000) + deep(10), true, 0, 0},
		{"brackets in a string", `a = "` + strings.Repeat("[", 1000) + `"`, true, 0, 0},
		{"escaped quote", `a = "\"` + strings.Repeat("[", 1000) + `"`, true, 0, 0},
		{"brackets in comments", "# " + strings.Repeat("[", 1000) + "\n// " + strings.Repeat("{", 1000) + "\n/* " + strings.Repeat("(", 1000) + " */ a = 1", true, 0, 0},
		{"interpolation", "a = \"${" + strings.Repeat("[", 1000) + "}\"", false, 1, 8 + Max - 2},
		{"escaped interpolation", "a = \"$${" + strings.Repeat("[", 1000) + "}\"", true, 0, 0},
		{"nested templates", "a = " + strings.Repeat(`"${`, 40) + strings.Repeat(`}"`, 40), false, 0, 0},
		{"heredoc text does not count", "a = <<EOF\n" + strings.Repeat("[", 100) + "\nEOF\n", true, 0, 0},
		{"heredoc closes", "a = <<-EOT\n  x\n  EOT\nb = " + deep(Max-1) + "\n", true, 0, 0},
		{"heredoc interpolation", "a = <<EOF\n${" + strings.Repeat("(", 1000) + "\nEOF\n", false, 0, 0},
		{"a string ends with its line", "a = \"x\n" + deep(Max), true, 0, 0},
		{"prefix operators", "a = " + strings.Repeat("!", 1000) + "true", false, 1, 5 + Max},
		{"negations", "a = " + strings.Repeat("-", 1000) + "1", false, 0, 0},
		{"conditionals", "a = " + strings.Repeat("true ? 1 : ", 1000) + "1", false, 0, 0},
		{"operators inside brackets", "a = " + strings.Repeat("[", 32) + strings.Repeat("!", 40) + "true" + strings.Repeat("]", 32), false, 0, 0},
		{"negative numbers", "a = [" + strings.Repeat("-1, ", 1000) + "-1]\nb = -1\nc = -2\n" + strings.Repeat("d = 1 - 2\n", 100), true, 0, 0},
		{"conditionals in a block", "x {\n" + strings.Repeat("  a = b ? 1 : 2\n", 200) + "}\n", true, 0, 0},
		{"not equal", "a = " + strings.Repeat("1 != ", 200) + "1", true, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := HCL([]byte(c.src), 0)
			if c.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("accepted (err %v)", err)
			}
			if de.Max != Max || (c.line > 0 && de.Line != c.line) || (c.col > 0 && de.Col != c.col) {
				t.Fatalf("error at %d:%d (max %d), want %d:%d: %v", de.Line, de.Col, de.Max, c.line, c.col, err)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	for _, c := range []struct {
		name, src string
		templates bool
		ok        bool
	}{
		{"flat", `{"a": [1, 2, {"b": "c"}]}`, false, true},
		{"deep", strings.Repeat(`[`, 65000), false, false},
		{"deep objects", strings.Repeat(`{"a":`, Max+1) + `1` + strings.Repeat(`}`, Max+1), false, false},
		{"at the limit", strings.Repeat(`[`, Max) + strings.Repeat(`]`, Max), false, true},
		{"brackets in strings", `{"a": "` + strings.Repeat("[", 1000) + `"}`, false, true},
		{"escaped quote", `{"a": "\"` + strings.Repeat("[", 1000) + `"}`, false, true},
		{"an API string is opaque", `{"a": "${` + strings.Repeat("[", 1000) + `}"}`, false, true},
		{"a template is not", `{"a": "${` + strings.Repeat("[", 1000) + `}"}`, true, false},
		{"escaped template", `{"a": "$${` + strings.Repeat("[", 1000) + `}"}`, true, true},
		{"template closes", `{"a": "${[1]} ` + strings.Repeat("[", 1000) + `"}`, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := JSON([]byte(c.src), 0, c.templates)
			if c.ok != (err == nil) {
				t.Fatalf("ok %v, err %v", c.ok, err)
			}
		})
	}
}

func TestLimitArgument(t *testing.T) {
	if err := HCL([]byte("[[[]]]"), 2); err == nil {
		t.Fatal("depth 3 accepted with a limit of 2")
	}
	if err := JSON([]byte("[[]]"), 2, false); err != nil {
		t.Fatal(err)
	}
}

// FuzzDepth: the scans never panic, and what they accept nests at most
// Max brackets deep.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{`a = [1, {b = "${c[0]}"}]`, "a = <<EOF\n${x}\nEOF\n", `{"a": ["$${x}"]}`, strings.Repeat("[", 65000)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		errH := HCL(b, 0)
		errJ := JSON(b, 0, true)
		_ = JSON(b, 0, false)
		// Brackets alone, however they are read, nest no deeper than
		// their raw count: text with at most Max opening brackets passes.
		n := 0
		for _, c := range []string{"[", "{", "(", "\"", "<<", "!", "-", "?"} {
			n += strings.Count(string(b), c)
		}
		if n <= Max {
			if errH != nil || errJ != nil {
				t.Fatalf("refused text with at most %d openers: %v %v", Max, errH, errJ)
			}
		}
	})
}
