package config

import (
	"math"
	"strconv"
	"strings"

	"github.com/zclconf/go-cty/cty"
)

// memoryUnits are the suffixes a memory size may carry: binary (KiB, MiB,
// GiB, TiB) and decimal (KB, MB, GB, TB), case-insensitive; none is bytes.
var memoryUnits = []struct {
	suffix string
	factor float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"b", 1},
}

// parseMemory reads a memory size such as "2GiB", "512 MiB", "1.5GB" or
// "1073741824" (bytes), into bytes.
func parseMemory(s string) (int64, bool) {
	t := strings.ToLower(strings.TrimSpace(s))
	factor := 1.0
	for _, u := range memoryUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, false
	}
	v := f * factor
	if v >= math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// memorySize reads a memory size argument: a string with a unit ("2GiB")
// or a number of bytes. It must be at least 1 MiB: leaving it out is how
// the automatic bound is chosen.
func (d *decoder) memorySize(c *content, name, path string) opt[int64] {
	var o opt[int64]
	a, ok := c.attrs[name]
	if !ok {
		return o
	}
	field := join(path, name)
	v, ok := d.eval(a.Expr, field)
	if !ok {
		return o
	}
	var text string
	switch {
	case v.IsNull() || !v.IsKnown():
		d.errf(a.Expr.Range(), field, `must be a size such as "2GiB" or "512MiB"`)
		return o
	case v.Type() == cty.Number:
		text = v.AsBigFloat().Text('f', -1)
	case v.Type() == cty.String:
		text = v.AsString()
	default:
		d.errf(a.Expr.Range(), field, `must be a size such as "2GiB" or "512MiB"`)
		return o
	}
	n, ok := parseMemory(text)
	switch {
	case !ok:
		d.errf(a.Expr.Range(), field, `%q is not a size: use a number with a unit, such as "2GiB", "512MiB" or "4GB"`, text)
	case n < 1<<20:
		d.errf(a.Expr.Range(), field, "(%q) must be at least 1MiB; leave it out for the bound derived from the machine's memory", text)
	default:
		o.set(n, a.Expr.Range())
	}
	return o
}
