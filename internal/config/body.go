package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/ctsync/ctsync/internal/tmpl"
)

// This file holds the syntax-neutral part of the decoder: splitting a body
// into its arguments and blocks (with unknown-key detection), and turning
// argument expressions into Go values with precise error positions.

// opt is a setting that may or may not appear in a file. Rng is where its
// value was written, for errors found after merging.
type opt[T any] struct {
	V   T
	Set bool
	Rng hcl.Range
}

// or returns the value when set, else def.
func (o opt[T]) or(def T) T {
	if o.Set {
		return o.V
	}
	return def
}

// set records a value read from the configuration. Merging across files is
// simply decoding every file into the same raw structure: a later file's
// setting overwrites an earlier one's.
func (o *opt[T]) set(v T, rng hcl.Range) { *o = opt[T]{V: v, Set: true, Rng: rng} }

// merge takes n when it is set.
func (o *opt[T]) merge(n opt[T]) {
	if n.Set {
		*o = n
	}
}

// kind says how a key may be written.
type kind int

const (
	kAttr  kind = iota // an argument: name = value
	kBlock             // a block: name "label"... { ... }, possibly repeated
	kMap               // a map: name = { ... } or name { ... }
)

// key is one key a body accepts.
type key struct {
	name   string
	kind   kind
	labels int    // blocks only: how many labels the block has
	label  string // what the label means, for messages ("type", "name")
}

func attrs(names ...string) []key {
	ks := make([]key, len(names))
	for i, n := range names {
		ks[i] = key{name: n, kind: kAttr}
	}
	return ks
}

// content is a body split into its arguments and blocks. A kMap key
// written as a block is found in blocks.
type content struct {
	attrs  map[string]*hcl.Attribute
	blocks map[string][]*hcl.Block
	// missing is where to point at when a required key is absent.
	missing hcl.Range
}

func (c *content) attr(name string) *hcl.Attribute { return c.attrs[name] }

// decoder collects errors and warnings while walking the configuration.
type decoder struct {
	src   map[string][]byte // file name -> bytes, to extract expression text
	errs  []*Error
	warns []string
	// inProvider is set while decoding a terraform_provider block, where
	// template syntax is allowed.
	inProvider bool
	// secretFields are the fields outside terraform_provider blocks
	// written with {{ with secret }} (secretfields.go).
	secretFields []SecretField
}

func (d *decoder) errf(rng hcl.Range, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{Range: rng, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) warnf(rng hcl.Range, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	if pos := posString(rng); pos != "" {
		msg = pos + ": " + msg
	}
	d.warns = append(d.warns, msg)
}

// addDiags records HCL's own error diagnostics (syntax errors, invalid
// expressions) and keeps its warnings.
func (d *decoder) addDiags(diags hcl.Diagnostics, field string) {
	for _, dg := range diags {
		var rng hcl.Range
		if dg.Subject != nil {
			rng = *dg.Subject
		}
		msg := dg.Summary
		if dg.Detail != "" {
			msg += ": " + dg.Detail
		}
		if dg.Severity == hcl.DiagError {
			d.errs = append(d.errs, &Error{Range: rng, Field: field, Msg: msg})
		} else {
			d.warnf(rng, field, "%s", msg)
		}
	}
}

// join builds a field path for messages.
func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// blockPath renders a block for a field path: `type "label"...`.
func blockPath(parent string, b *hcl.Block) string {
	s := b.Type
	for _, l := range b.Labels {
		s += " " + strconv.Quote(l)
	}
	return join(parent, s)
}

// content splits body into the keys it accepts. Keys in rejects give the
// associated error wherever they appear (as an argument or a block); any
// other key not in keys is reported as unknown.
//
// Native HCL bodies are walked directly, which tells arguments from blocks;
// JSON bodies go through a BodySchema (JSON has no syntax for blocks, so the
// schema says which keys are blocks) and the leftovers are the unknown keys.
func (d *decoder) content(body hcl.Body, path string, keys []key, rejects map[string]string) *content {
	c := &content{attrs: map[string]*hcl.Attribute{}, blocks: map[string][]*hcl.Block{}}
	if body == nil {
		return c
	}
	c.missing = body.MissingItemRange()
	known := make(map[string]key, len(keys))
	for _, k := range keys {
		known[k.name] = k
	}

	if hsb, ok := body.(*hclsyntax.Body); ok {
		list := make([]*hclsyntax.Attribute, 0, len(hsb.Attributes))
		for _, a := range hsb.Attributes {
			list = append(list, a)
		}
		sortRanges(list, func(a *hclsyntax.Attribute) hcl.Range { return a.SrcRange })
		for _, a := range list {
			field := join(path, a.Name)
			if msg, ok := rejects[a.Name]; ok {
				d.errf(a.NameRange, field, "%s", msg)
				continue
			}
			k, ok := known[a.Name]
			if !ok {
				d.unknown(a.NameRange, path, a.Name, keys)
				continue
			}
			if k.kind == kBlock {
				d.errf(a.NameRange, field, "must be a block (%s { ... }), not an argument", blockHeader(k))
				continue
			}
			c.attrs[a.Name] = a.AsHCLAttribute()
		}
		for _, b := range hsb.Blocks {
			field := join(path, b.Type)
			if msg, ok := rejects[b.Type]; ok {
				d.errf(b.TypeRange, field, "%s", msg)
				continue
			}
			k, ok := known[b.Type]
			if !ok {
				d.unknown(b.TypeRange, path, b.Type, keys)
				continue
			}
			switch k.kind {
			case kAttr:
				d.errf(b.TypeRange, field, "must be an argument (%s = ...), not a block", b.Type)
				continue
			case kMap:
				if len(b.Labels) > 0 {
					d.errf(b.LabelRanges[0], field, "this block takes no labels")
					continue
				}
				if a := c.attrs[b.Type]; a != nil {
					d.errf(b.TypeRange, field, "is set twice: as an argument at %s and as a block", posString(a.Range))
					continue
				}
				if len(c.blocks[b.Type]) > 0 {
					d.errf(b.TypeRange, field, "only one '%s' block can be configured", b.Type)
					continue
				}
			case kBlock:
				if len(b.Labels) != k.labels {
					d.errf(b.TypeRange, field, "%s", labelMsg(k, len(b.Labels)))
					continue
				}
			}
			c.blocks[b.Type] = append(c.blocks[b.Type], b.AsHCLBlock())
		}
		return c
	}

	if hb, ok := body.(*h1Body); ok {
		d.contentHCL1(hb, c, path, known, keys, rejects)
		return c
	}

	schema := &hcl.BodySchema{}
	for _, k := range keys {
		if k.kind == kBlock {
			ln := make([]string, k.labels)
			for i := range ln {
				ln[i] = k.label
				if ln[i] == "" {
					ln[i] = "label"
				}
			}
			schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: k.name, LabelNames: ln})
		} else {
			schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: k.name})
		}
	}
	rejectNames := make([]string, 0, len(rejects))
	for n := range rejects {
		if _, dup := known[n]; !dup {
			rejectNames = append(rejectNames, n)
		}
	}
	sort.Strings(rejectNames)
	for _, n := range rejectNames {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: n})
	}
	bc, remain, diags := body.PartialContent(schema)
	d.addDiags(diags, path)
	if bc != nil {
		list := make([]*hcl.Attribute, 0, len(bc.Attributes))
		for _, a := range bc.Attributes {
			list = append(list, a)
		}
		sortRanges(list, func(a *hcl.Attribute) hcl.Range { return a.Range })
		for _, a := range list {
			if msg, ok := rejects[a.Name]; ok {
				d.errf(a.NameRange, join(path, a.Name), "%s", msg)
				continue
			}
			c.attrs[a.Name] = a
		}
		for _, b := range bc.Blocks {
			c.blocks[b.Type] = append(c.blocks[b.Type], b)
		}
	}
	if remain != nil {
		left, diags := remain.JustAttributes()
		d.addDiags(diags, path)
		list := make([]*hcl.Attribute, 0, len(left))
		for _, a := range left {
			list = append(list, a)
		}
		sortRanges(list, func(a *hcl.Attribute) hcl.Range { return a.Range })
		for _, a := range list {
			d.unknown(a.NameRange, path, a.Name, keys)
		}
	}
	return c
}

func blockHeader(k key) string {
	s := k.name
	for i := 0; i < k.labels; i++ {
		s += ` "..."`
	}
	return s
}

func labelMsg(k key, got int) string {
	switch k.labels {
	case 0:
		return fmt.Sprintf("a '%s' block takes no labels", k.name)
	case 1:
		return fmt.Sprintf("a '%s' block needs exactly one label (%s { ... }), found %d", k.name, blockHeader(k), got)
	}
	return fmt.Sprintf("a '%s' block needs %d labels, found %d", k.name, k.labels, got)
}

// unknown reports a key that the body does not accept, suggesting the
// closest known key.
func (d *decoder) unknown(rng hcl.Range, path, name string, keys []key) {
	msg := "unknown field"
	if path == "" {
		msg = "unknown top-level field"
	}
	best, bestDist := "", 3
	for _, k := range keys {
		if dist := levenshtein(name, k.name); dist < bestDist {
			best, bestDist = k.name, dist
		}
	}
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	d.errf(rng, join(path, name), "%s", msg)
}

func levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt32
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// onlyOne reports every block of typ after the first and returns the first
// (or nil).
func (d *decoder) onlyOne(c *content, typ, path string) *hcl.Block {
	bs := c.blocks[typ]
	if len(bs) == 0 {
		return nil
	}
	for _, b := range bs[1:] {
		d.errf(b.DefRange, join(path, typ), "only one '%s' block can be configured", typ)
	}
	return bs[0]
}

// ---- values ----

// eval evaluates an expression without variables or functions. A null value
// counts as not set.
func (d *decoder) eval(expr hcl.Expression, field string) (cty.Value, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.addDiags(diags, field)
		return cty.NilVal, false
	}
	if v == cty.NilVal || v.IsNull() {
		return cty.NilVal, false
	}
	v, _ = v.UnmarkDeep()
	if !v.IsWhollyKnown() {
		d.errf(expr.Range(), field, "must be a constant value")
		return cty.NilVal, false
	}
	return v, true
}

func hasTemplate(s string) bool { return tmpl.HasAction(s) }

const templateMsg = "template syntax ({{ ... }}) is only allowed inside terraform_provider blocks"

// checkNoTemplate reports template syntax anywhere inside v.
func (d *decoder) checkNoTemplate(v cty.Value, rng hcl.Range, field string) bool {
	found := false
	walkStrings(v, func(s string) {
		if !found && hasTemplate(s) {
			found = true
		}
	})
	if found {
		d.errf(rng, field, templateMsg)
	}
	return !found
}

func walkStrings(v cty.Value, fn func(string)) {
	if v == cty.NilVal || v.IsNull() || !v.IsKnown() {
		return
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		fn(v.AsString())
	case ty.IsListType() || ty.IsSetType() || ty.IsTupleType() || ty.IsMapType() || ty.IsObjectType():
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			walkStrings(e, fn)
		}
	}
}

// typed reads argument name and converts it to typ with CTS's weak typing
// (weakConvert); a value that does not convert (or is null) is reported
// with msg. ok is false when the argument is absent or invalid.
func (d *decoder) typed(c *content, name, path string, typ cty.Type, msg string) (v cty.Value, a *hcl.Attribute, field string, ok bool) {
	a = c.attr(name)
	if a == nil {
		return cty.NilVal, nil, "", false
	}
	field = join(path, name)
	raw, ok := d.eval(a.Expr, field)
	if !ok {
		return cty.NilVal, a, field, false
	}
	v, err := weakConvert(raw, typ) // weak.go: CTS's weak typing
	var null errNullElement
	switch {
	case errors.As(err, &null):
		rng := a.Expr.Range()
		if exprs, diags := hcl.ExprList(a.Expr); !diags.HasErrors() && null.at < len(exprs) {
			rng = exprs[null.at].Range()
		}
		d.errf(rng, fmt.Sprintf("%s[%d]", field, null.at), "cannot be null")
		return cty.NilVal, a, field, false
	case err != nil || v.IsNull():
		d.errf(a.Expr.Range(), field, "%s", msg)
		return cty.NilVal, a, field, false
	}
	return v, a, field, true
}

// str reads a string argument. Numbers, bools and a one-element list are
// accepted as CTS's weakly typed decoding takes them (weakConvert).
func (d *decoder) str(c *content, name, path string) opt[string] {
	var o opt[string]
	sv, a, field, ok := d.typed(c, name, path, cty.String, "must be a string")
	if !ok {
		return o
	}
	s := sv.AsString()
	if !d.inProvider && hasTemplate(s) {
		d.errf(a.Expr.Range(), field, templateMsg)
		return o
	}
	o.set(s, a.Expr.Range())
	return o
}

func (d *decoder) boolean(c *content, name, path string) opt[bool] {
	var o opt[bool]
	bv, a, _, ok := d.typed(c, name, path, cty.Bool, "must be a bool (true or false)")
	if !ok {
		return o
	}
	o.set(bv.True(), a.Expr.Range())
	return o
}

func (d *decoder) integer(c *content, name, path string) opt[int] {
	var o opt[int]
	nv, a, field, ok := d.typed(c, name, path, cty.Number, "must be a whole number")
	if !ok {
		return o
	}
	bf := nv.AsBigFloat()
	if !bf.IsInt() {
		d.errf(a.Expr.Range(), field, "must be a whole number")
		return o
	}
	i, acc := bf.Int64()
	if acc != 0 || i > math.MaxInt32 || i < math.MinInt32 {
		d.errf(a.Expr.Range(), field, "is out of range")
		return o
	}
	o.set(int(i), a.Expr.Range())
	return o
}

// duration reads a Go duration string ("5s", "1m30s"). Negative durations
// are errors.
func (d *decoder) duration(c *content, name, path string) opt[time.Duration] {
	var o opt[time.Duration]
	s := d.str(c, name, path)
	if !s.Set {
		return o
	}
	v, err := time.ParseDuration(s.V)
	if err != nil {
		d.errf(s.Rng, join(path, name), "%q is not a valid duration (use a Go duration such as \"5s\" or \"1m30s\")", s.V)
		return o
	}
	if v < 0 {
		d.errf(s.Rng, join(path, name), "cannot be negative")
		return o
	}
	o.set(v, s.Rng)
	return o
}

// strList reads a list of strings. elems holds each element's range when
// the list is written literally.
func (d *decoder) strList(c *content, name, path string) (o opt[[]string], elems []hcl.Range) {
	lv, a, field, ok := d.typed(c, name, path, cty.List(cty.String), "must be a list of strings")
	if !ok {
		return o, nil
	}
	if exprs, diags := hcl.ExprList(a.Expr); !diags.HasErrors() && len(exprs) == lv.LengthInt() {
		for _, e := range exprs {
			elems = append(elems, e.Range())
		}
	}
	out := []string{}
	i := 0
	for it := lv.ElementIterator(); it.Next(); i++ {
		_, e := it.Element()
		rng := a.Expr.Range()
		if i < len(elems) {
			rng = elems[i]
		}
		if e.IsNull() {
			d.errf(rng, fmt.Sprintf("%s[%d]", field, i), "cannot be null")
			return opt[[]string]{}, nil
		}
		s := e.AsString()
		if !d.inProvider && hasTemplate(s) {
			d.errf(rng, fmt.Sprintf("%s[%d]", field, i), templateMsg)
			return opt[[]string]{}, nil
		}
		out = append(out, s)
	}
	o.set(out, a.Expr.Range())
	return o, elems
}

// entry is one item of a map written as an argument or as a block.
type entry struct {
	key    string
	keyRng hcl.Range
	expr   hcl.Expression
}

// mapEntries reads a kMap key: `name = { k = v }` or `name { k = v }`. rng
// is where the map was written.
func (d *decoder) mapEntries(c *content, name, path string) (entries []entry, rng hcl.Range, ok bool) {
	field := join(path, name)
	if a := c.attr(name); a != nil {
		expr := a.Expr
		pairs, diags := hcl.ExprMap(expr)
		if diags.HasErrors() {
			// JSON may write a block as a one-element list of objects.
			if list, ldiags := hcl.ExprList(expr); !ldiags.HasErrors() && len(list) == 1 {
				pairs, diags = hcl.ExprMap(list[0])
			}
		}
		if diags.HasErrors() {
			if v, diags := expr.Value(nil); !diags.HasErrors() && v.IsNull() {
				return nil, a.Range, false
			}
			d.errf(expr.Range(), field, "must be a map (%s = { key = value })", name)
			return nil, a.Range, false
		}
		for _, p := range pairs {
			kv, ok := d.eval(p.Key, field)
			if !ok {
				continue
			}
			ks, err := convert.Convert(kv, cty.String)
			if err != nil || ks.IsNull() {
				d.errf(p.Key.Range(), field, "map keys must be strings")
				continue
			}
			entries = append(entries, entry{key: ks.AsString(), keyRng: p.Key.Range(), expr: p.Value})
		}
		return entries, a.Range, true
	}
	bs := c.blocks[name]
	if len(bs) == 0 {
		return nil, hcl.Range{}, false
	}
	b := bs[0]
	as, diags := b.Body.JustAttributes()
	d.addDiags(diags, field)
	list := make([]*hcl.Attribute, 0, len(as))
	for _, a := range as {
		list = append(list, a)
	}
	sortRanges(list, func(a *hcl.Attribute) hcl.Range { return a.Range })
	for _, a := range list {
		entries = append(entries, entry{key: a.Name, keyRng: a.NameRange, expr: a.Expr})
	}
	return entries, b.DefRange, true
}

// strMap reads a map of strings written as an argument or a block.
func (d *decoder) strMap(c *content, name, path string) (opt[map[string]string], map[string]hcl.Range) {
	var o opt[map[string]string]
	entries, rng, ok := d.mapEntries(c, name, path)
	if !ok {
		return o, nil
	}
	field := join(path, name)
	out := make(map[string]string, len(entries))
	rngs := make(map[string]hcl.Range, len(entries))
	good := true
	for _, e := range entries {
		f := field + "." + e.key
		v, ok := d.eval(e.expr, f)
		if !ok { // null (dropped) or already reported
			continue
		}
		sv, err := weakConvert(v, cty.String)
		if err != nil || sv.IsNull() {
			d.errf(e.expr.Range(), f, "must be a string")
			good = false
			continue
		}
		s := sv.AsString()
		if !d.inProvider && hasTemplate(s) {
			d.errf(e.expr.Range(), f, templateMsg)
			good = false
			continue
		}
		out[e.key] = s
		rngs[e.key] = e.expr.Range()
	}
	if !good {
		return o, nil
	}
	o.set(out, rng)
	return o, rngs
}

// exprText returns HCL expression source text for an evaluated value:
// native HCL keeps the text exactly as written (except heredocs, which do
// not stand alone); JSON values, which have no HCL spelling, are rendered as
// HCL literals.
func (d *decoder) exprText(expr hcl.Expression, v cty.Value) string {
	if _, native := expr.(hclsyntax.Expression); native {
		r := expr.Range()
		if src, ok := d.src[r.Filename]; ok && r.Start.Byte >= 0 && r.End.Byte <= len(src) && r.Start.Byte < r.End.Byte {
			text := string(src[r.Start.Byte:r.End.Byte])
			if !strings.HasPrefix(text, "<<") {
				return text
			}
		}
	}
	return hclLiteral(v)
}

// hclLiteral renders a constant value as HCL expression text, with
// hclwrite (which escapes "${" and "%{" in strings so that HCL reads the
// same string back instead of a template). A value that is not wholly known
// (never the case for constants) is rendered as null.
func hclLiteral(v cty.Value) string {
	if v == cty.NilVal || !v.IsWhollyKnown() {
		return "null"
	}
	return string(hclwrite.TokensForValue(v).Bytes())
}
