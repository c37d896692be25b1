package depth

import (
	"runtime/debug"
	"strings"
	"testing"

	hcl1 "github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	hcljson "github.com/hashicorp/hcl/v2/json"
)

// FuzzParsersWithinBound checks the scans against the parsers they guard:
// text a scan accepts is parsed (HCL 2 native and JSON syntax, HCL 1, as
// a file and as an expression) with the goroutine stack limited to 4 MiB,
// which a parser recursing several times deeper than Max levels exhausts
// (a few hundred `[`; the 65,000 of issue 35 needed more than 1 GiB): a
// byte sequence the scan counts much shallower than the parser recurses
// crashes the target. The seeds at the limit show that what the scan
// accepts fits.
func FuzzParsersWithinBound(f *testing.F) {
	for _, s := range []string{
		`a = [1, {b = "${c[0]}"}]`, "a = <<EOF\n${x}\nEOF\n", `{"a": ["$${x}"]}`, "a = \"${ # [\n}\"",
		"a = /* [[ */ 1", "a = \"%{ if x }[%{ endif }\"", strings.Repeat("[", 65000), strings.Repeat(`"${`, 5000),
		// At the limit.
		"a = " + strings.Repeat("[", Max-1) + strings.Repeat("]", Max-1),
		"a = " + strings.Repeat(`"${`, Max/2-1) + "1" + strings.Repeat(`}"`, Max/2-1),
		"a = " + strings.Repeat("!", Max-1) + "true",
		"a = " + strings.Repeat("(", Max/2) + strings.Repeat("true ? 1 : ", Max/2-1) + "1" + strings.Repeat(")", Max/2),
		`{"a": "` + strings.Repeat("${[", Max/2-1) + strings.Repeat("]}", Max/2-1) + `"}`,
	} {
		f.Add([]byte(s))
	}
	debug.SetMaxStack(4 << 20)
	f.Fuzz(func(t *testing.T, b []byte) {
		if HCL(b, 0) == nil {
			_, _ = hclsyntax.ParseConfig(b, "f.hcl", hcl.InitialPos)
			_, _ = hclsyntax.ParseExpression(b, "f.hcl", hcl.InitialPos)
			_, _ = hclsyntax.ParseTemplate(b, "f.hcl", hcl.InitialPos)
			_, _ = hcl1.ParseBytes(b)
		}
		if JSON(b, 0, true) == nil {
			_, _ = hcljson.Parse(b, "f.json")
		}
	})
}
