package config

import (
	"fmt"
	"sort"
	"strings"

	hcl1 "github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
	"github.com/hashicorp/hcl/hcl/token"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// This file reads configuration files the way CTS does: with the original
// HCL (version 1). HCL 1 accepts forms that HCL 2's native syntax refuses —
// arguments after a closing brace on the same line, commas between the
// arguments of a one-line block, several arguments on a block's opening
// line, a block written as an object (`buffer_period = { ... }`), repeated
// blocks written as a list of objects (`task = [{ ... }]`), a repeated
// argument (the last one wins) — and reads some strings differently ("${x}"
// is plain text, not an interpolation).
//
// An HCL 1 syntax tree is presented to the decoder as an hcl.Body, with
// ranges taken from HCL 1's positions, so that the one decoder (and its one
// set of rules and messages) serves both syntaxes.

// parseHCL1 parses src with HCL 1 (JSON too, when the text starts with "{",
// as HCL 1 decides). It returns nil when HCL 1 refuses the text.
func parseHCL1(name string, src []byte) (body *h1Body) {
	defer func() {
		if recover() != nil { // HCL 1 panics on some malformed input
			body = nil
		}
	}()
	// Decoding into an ast.Node hands back the syntax tree of the same
	// parse CTS's hcl.Decode does (a repeated argument is not an error).
	var root ast.Node
	if err := hcl1.Decode(&root, string(src)); err != nil || root == nil {
		return nil
	}
	list, ok := root.(*ast.ObjectList)
	if !ok {
		return nil
	}
	sf := newH1File(name, src)
	return &h1Body{f: sf, items: list.Items, rng: sf.rangeOf(0, len(src)), open: sf.rangeOf(0, 0)}
}

// h1File maps HCL 1 byte offsets to hcl.Pos values.
type h1File struct {
	name  string
	src   []byte
	lines []int // byte offset at which each line starts
}

func newH1File(name string, src []byte) *h1File {
	f := &h1File{name: name, src: src, lines: []int{0}}
	for i, c := range src {
		if c == '\n' {
			f.lines = append(f.lines, i+1)
		}
	}
	return f
}

func (f *h1File) pos(off int) hcl.Pos {
	off = max(0, min(off, len(f.src)))
	line := sort.Search(len(f.lines), func(i int) bool { return f.lines[i] > off }) - 1
	return hcl.Pos{Line: line + 1, Column: off - f.lines[line] + 1, Byte: off}
}

func (f *h1File) rangeOf(start, end int) hcl.Range {
	if end < start {
		end = start
	}
	return hcl.Range{Filename: f.name, Start: f.pos(start), End: f.pos(end)}
}

// span returns the byte offsets a node covers in the source.
func span(n ast.Node) (start, end int) {
	switch n := n.(type) {
	case *ast.LiteralType:
		return n.Token.Pos.Offset, n.Token.Pos.Offset + len(n.Token.Text)
	case *ast.ListType:
		return n.Lbrack.Offset, n.Rbrack.Offset + 1
	case *ast.ObjectType:
		return n.Lbrace.Offset, n.Rbrace.Offset + 1
	case *ast.ObjectKey:
		return n.Token.Pos.Offset, n.Token.Pos.Offset + len(n.Token.Text)
	case *ast.ObjectItem:
		s, _ := span(n.Keys[0])
		_, e := span(n.Val)
		return s, e
	}
	o := n.Pos().Offset
	return o, o + 1
}

func (f *h1File) nodeRange(n ast.Node) hcl.Range {
	s, e := span(n)
	return f.rangeOf(s, e)
}

func keyName(k *ast.ObjectKey) string {
	if k.Token.Type == token.STRING {
		if s, ok := tokenValue(k.Token).(string); ok {
			return s
		}
	}
	return k.Token.Text
}

// tokenValue is token.Value without its panics (nil when the token's text
// is not a valid value).
func tokenValue(t token.Token) (v any) {
	defer func() {
		if recover() != nil {
			v = nil
		}
	}()
	return t.Value()
}

func assigned(it *ast.ObjectItem) bool { return it.Assign.IsValid() }

// ---- body ----

// h1Body is an HCL 1 object (a file or a block's braces) seen as an
// hcl.Body.
type h1Body struct {
	f     *h1File
	items []*ast.ObjectItem
	rng   hcl.Range // the whole object
	open  hcl.Range // its opening brace: where a missing item is reported
}

var _ hcl.Body = (*h1Body)(nil)

func (b *h1Body) MissingItemRange() hcl.Range { return b.open }

func (b *h1Body) objectBody(o *ast.ObjectType) *h1Body {
	return &h1Body{f: b.f, items: o.List.Items, rng: b.f.nodeRange(o), open: b.f.rangeOf(o.Lbrace.Offset, o.Lbrace.Offset+1)}
}

// attribute presents an item as an argument. A block-style item
// (`name { ... }`) is an argument holding an object, as in HCL 1.
func (b *h1Body) attribute(it *ast.ObjectItem) *hcl.Attribute {
	ks, _ := span(it.Keys[0])
	_, ve := span(it.Val)
	return &hcl.Attribute{
		Name:      keyName(it.Keys[0]),
		Expr:      b.expr(it.Val),
		Range:     b.f.rangeOf(ks, ve),
		NameRange: b.f.nodeRange(it.Keys[0]),
	}
}

// combine turns the items that set one key into one argument, as CTS's
// decoding does: the last value wins, except that lists are appended and
// maps (written as an argument or a block) are merged.
func (b *h1Body) combine(items []*ast.ObjectItem) *hcl.Attribute {
	last := items[len(items)-1]
	if len(items) == 1 {
		return b.attribute(last)
	}
	allLists, allObjects := true, true
	for _, it := range items {
		_, isList := it.Val.(*ast.ListType)
		_, isObj := it.Val.(*ast.ObjectType)
		allLists = allLists && isList
		allObjects = allObjects && isObj
	}
	a := b.attribute(last)
	switch {
	case allLists:
		l := &ast.ListType{Lbrack: items[0].Val.(*ast.ListType).Lbrack, Rbrack: last.Val.(*ast.ListType).Rbrack}
		for _, it := range items {
			l.List = append(l.List, it.Val.(*ast.ListType).List...)
		}
		a.Expr = &h1Expr{body: b, node: l, synthetic: true}
	case allObjects:
		o := &ast.ObjectType{Lbrace: items[0].Val.(*ast.ObjectType).Lbrace, Rbrace: last.Val.(*ast.ObjectType).Rbrace, List: &ast.ObjectList{}}
		for _, it := range items {
			o.List.Items = append(o.List.Items, it.Val.(*ast.ObjectType).List.Items...)
		}
		a.Expr = &h1Expr{body: b, node: o, synthetic: true}
	}
	return a
}

// grouped returns the body's items by first key, keys in source order.
func (b *h1Body) grouped() (names []string, groups map[string][]*ast.ObjectItem) {
	groups = map[string][]*ast.ObjectItem{}
	for _, it := range b.items {
		if len(it.Keys) == 0 || it.Val == nil {
			continue
		}
		n := keyName(it.Keys[0])
		if _, seen := groups[n]; !seen {
			names = append(names, n)
		}
		groups[n] = append(groups[n], it)
	}
	return names, groups
}

// JustAttributes presents every item as an argument. An item with labels
// (`name "label" { ... }`) is not an argument.
func (b *h1Body) JustAttributes() (hcl.Attributes, hcl.Diagnostics) {
	out := hcl.Attributes{}
	var diags hcl.Diagnostics
	names, groups := b.grouped()
	for _, n := range names {
		var items []*ast.ObjectItem
		for _, it := range groups[n] {
			if len(it.Keys) > 1 {
				rng := b.f.nodeRange(it.Keys[0])
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unexpected block",
					Detail: fmt.Sprintf("Blocks are not allowed here: %q must be an argument (%s = ...).", n, n), Subject: &rng})
				continue
			}
			items = append(items, it)
		}
		if len(items) > 0 {
			out[n] = b.combine(items)
		}
	}
	return out, diags
}

func (b *h1Body) Content(schema *hcl.BodySchema) (*hcl.BodyContent, hcl.Diagnostics) {
	c, remain, diags := b.PartialContent(schema)
	if rb := remain.(*h1Body); len(rb.items) > 0 {
		for _, it := range rb.items {
			rng := b.f.nodeRange(it.Keys[0])
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported argument",
				Detail: fmt.Sprintf("An argument named %q is not expected here.", keyName(it.Keys[0])), Subject: &rng})
		}
	}
	return c, diags
}

// PartialContent splits the body by a schema: a block type takes the
// items with that key whose value is an object or a list of objects
// (labels taken from the item's further keys or the object's keys).
func (b *h1Body) PartialContent(schema *hcl.BodySchema) (*hcl.BodyContent, hcl.Body, hcl.Diagnostics) {
	c := &hcl.BodyContent{Attributes: hcl.Attributes{}, MissingItemRange: b.open}
	remain := &h1Body{f: b.f, rng: b.rng, open: b.open}
	attrNames := map[string]bool{}
	for _, a := range schema.Attributes {
		attrNames[a.Name] = true
	}
	blockLabels := map[string]int{}
	for _, bs := range schema.Blocks {
		blockLabels[bs.Type] = len(bs.LabelNames)
	}
	var diags hcl.Diagnostics
	names, groups := b.grouped()
	for _, n := range names {
		items := groups[n]
		switch nl, isBlock := blockLabels[n]; {
		case attrNames[n]:
			out, d := (&h1Body{f: b.f, items: items}).JustAttributes()
			diags = append(diags, d...)
			if a := out[n]; a != nil {
				c.Attributes[n] = a
			}
		case isBlock:
			for _, it := range items {
				bs, ok := b.blocks(it, nl)
				if !ok {
					rng := b.f.nodeRange(it.Keys[0])
					diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported argument",
						Detail: fmt.Sprintf("%q must be a block.", n), Subject: &rng})
				}
				c.Blocks = append(c.Blocks, bs...)
			}
		default:
			remain.items = append(remain.items, items...)
		}
	}
	for _, a := range schema.Attributes {
		if a.Required && c.Attributes[a.Name] == nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing required argument",
				Detail: fmt.Sprintf("The argument %q is required.", a.Name), Subject: &b.open})
		}
	}
	return c, remain, diags
}

// blocks reads an item as blocks with nlabels labels. HCL 1 spells one
// block in several ways, all equivalent for CTS:
//
//	condition "services" { names = ["a"] }
//	condition services { names = ["a"] }
//	condition { services { names = ["a"] } }
//	condition = { services = { names = ["a"] } }
//	condition = [{ services = [{ names = ["a"] }] }]
//
// Labels are taken first from the item's keys after the type, then from the
// keys of the object it holds. ok is false when the value is not an object
// (or a list of objects) where one is needed; a needed label that is not
// there gives a block with fewer labels, which the caller reports.
func (b *h1Body) blocks(it *ast.ObjectItem, nlabels int) (out []*hcl.Block, ok bool) {
	typ := it.Keys[0]
	ok = true
	var walk func(labels []*ast.ObjectKey, keys []*ast.ObjectKey, assign token.Pos, val ast.Node)
	walk = func(labels []*ast.ObjectKey, keys []*ast.ObjectKey, assign token.Pos, val ast.Node) {
		for len(labels) < nlabels && len(keys) > 0 {
			labels = append(labels, keys[0])
			keys = keys[1:]
		}
		if len(keys) > 0 {
			// More keys than labels: `type "label" extra { ... }` is a
			// block holding `extra { ... }`.
			inner := &ast.ObjectItem{Keys: keys, Assign: assign, Val: val}
			s, _ := span(keys[0])
			_, e := span(val)
			body := &h1Body{f: b.f, items: []*ast.ObjectItem{inner}, rng: b.f.rangeOf(s, e), open: b.f.rangeOf(s, s)}
			out = append(out, b.block(typ, labels, body))
			return
		}
		var objs []*ast.ObjectType
		switch v := val.(type) {
		case *ast.ObjectType:
			objs = []*ast.ObjectType{v}
		case *ast.ListType:
			for _, e := range v.List {
				o, isObj := e.(*ast.ObjectType)
				if !isObj {
					ok = false
					return
				}
				objs = append(objs, o)
			}
		default:
			ok = false
			return
		}
		for _, o := range objs {
			if len(labels) == nlabels {
				out = append(out, b.block(typ, labels, b.objectBody(o)))
				continue
			}
			if len(o.List.Items) == 0 {
				// A block that misses its labels.
				out = append(out, b.block(typ, labels, b.objectBody(o)))
				continue
			}
			for _, inner := range o.List.Items {
				if len(inner.Keys) == 0 || inner.Val == nil {
					continue
				}
				walk(append(labels[:len(labels):len(labels)], inner.Keys[0]), inner.Keys[1:], inner.Assign, inner.Val)
			}
		}
	}
	walk(nil, it.Keys[1:], it.Assign, it.Val)
	return out, ok
}

func (b *h1Body) block(typ *ast.ObjectKey, labels []*ast.ObjectKey, body *h1Body) *hcl.Block {
	blk := &hcl.Block{Type: keyName(typ), Body: body, TypeRange: b.f.nodeRange(typ)}
	ts, te := span(typ)
	for _, l := range labels {
		blk.Labels = append(blk.Labels, keyName(l))
		blk.LabelRanges = append(blk.LabelRanges, b.f.nodeRange(l))
		if _, e := span(l); e > te && l.Token.Pos.Offset > ts {
			te = e
		}
	}
	blk.DefRange = b.f.rangeOf(ts, te)
	return blk
}

// rawItems lists the body's arguments and nested blocks without a schema
// (provider arguments): `name { ... }` is a nested block, `name = { ... }`
// an argument holding an object (a map), as Terraform reads them. (CTS
// renders both as a nested block, so a map-valued provider argument never
// worked there; a block written with "=" is the one CTS form read
// differently, see docs/migration.md.)
func (b *h1Body) rawItems() ([]*hcl.Attribute, []*hcl.Block) {
	var attrs []*hcl.Attribute
	var blocks []*hcl.Block
	names, groups := b.grouped()
	for _, n := range names {
		var args []*ast.ObjectItem
		for _, it := range groups[n] {
			if o, isObj := it.Val.(*ast.ObjectType); isObj && !assigned(it) {
				blocks = append(blocks, b.block(it.Keys[0], it.Keys[1:], b.objectBody(o)))
				continue
			}
			args = append(args, it)
		}
		if len(args) > 0 {
			attrs = append(attrs, b.combine(args))
		}
	}
	sortRanges(attrs, func(a *hcl.Attribute) hcl.Range { return a.Range })
	return attrs, blocks
}

// ---- expressions ----

// h1Expr is an HCL 1 value seen as an hcl.Expression. Its value is the
// HCL 1 value: strings are plain text (no interpolation).
type h1Expr struct {
	body *h1Body
	node ast.Node
	// synthetic is set for a value put together from several items (a
	// repeated list or map): it has no source text of its own.
	synthetic bool
}

var _ hcl.Expression = (*h1Expr)(nil)

func (b *h1Body) expr(n ast.Node) *h1Expr { return &h1Expr{body: b, node: n} }

func (e *h1Expr) Range() hcl.Range      { return e.body.f.nodeRange(e.node) }
func (e *h1Expr) StartRange() hcl.Range { return e.Range() }

func (e *h1Expr) Variables() []hcl.Traversal { return nil }

func (e *h1Expr) Functions() []hcl.Traversal { return nil }

// heredoc reports whether the value is a heredoc.
func (e *h1Expr) heredoc() bool {
	l, ok := e.node.(*ast.LiteralType)
	return ok && l.Token.Type == token.HEREDOC
}

// ExprList lets hcl.ExprList see the elements of a list.
func (e *h1Expr) ExprList() []hcl.Expression {
	l, ok := e.node.(*ast.ListType)
	if !ok {
		return nil
	}
	out := make([]hcl.Expression, len(l.List))
	for i, n := range l.List {
		out[i] = e.body.expr(n)
	}
	return out
}

// ExprMap lets hcl.ExprMap see the items of an object.
func (e *h1Expr) ExprMap() []hcl.KeyValuePair {
	o, ok := e.node.(*ast.ObjectType)
	if !ok {
		return nil
	}
	out := []hcl.KeyValuePair{}
	for _, it := range o.List.Items {
		if len(it.Keys) == 0 || it.Val == nil {
			continue
		}
		out = append(out, hcl.KeyValuePair{
			Key:   hcl.StaticExpr(cty.StringVal(keyName(it.Keys[0])), e.body.f.nodeRange(it.Keys[0])),
			Value: e.body.itemValue(it),
		})
	}
	return out
}

// itemValue is the value of an object item; `a "b" { ... }` holds
// { b = { ... } }.
func (b *h1Body) itemValue(it *ast.ObjectItem) *h1Expr {
	if len(it.Keys) == 1 {
		return b.expr(it.Val)
	}
	_, e := span(it.Val)
	inner := &ast.ObjectItem{Keys: it.Keys[1:], Assign: it.Assign, Val: it.Val}
	o := &ast.ObjectType{Lbrace: it.Keys[1].Token.Pos, Rbrace: token.Pos{Offset: e - 1}, List: &ast.ObjectList{Items: []*ast.ObjectItem{inner}}}
	return &h1Expr{body: b, node: o, synthetic: true}
}

func (e *h1Expr) Value(*hcl.EvalContext) (cty.Value, hcl.Diagnostics) {
	return e.body.value(e.node)
}

func (b *h1Body) value(n ast.Node) (cty.Value, hcl.Diagnostics) {
	bad := func(msg string) (cty.Value, hcl.Diagnostics) {
		rng := b.f.nodeRange(n)
		return cty.DynamicVal, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid value", Detail: msg, Subject: &rng}}
	}
	switch n := n.(type) {
	case *ast.LiteralType:
		switch n.Token.Type {
		case token.STRING, token.HEREDOC:
			if s, ok := tokenValue(n.Token).(string); ok {
				return cty.StringVal(s), nil
			}
			return bad("This string is not valid (check its escape sequences).")
		case token.NUMBER:
			if i, ok := tokenValue(n.Token).(int64); ok {
				return cty.NumberIntVal(i), nil
			}
			return bad("This is not a valid number.")
		case token.FLOAT:
			if f, ok := tokenValue(n.Token).(float64); ok {
				return cty.NumberFloatVal(f), nil
			}
			return bad("This is not a valid number.")
		case token.BOOL:
			if v, ok := tokenValue(n.Token).(bool); ok {
				return cty.BoolVal(v), nil
			}
			return bad("This is not a valid bool.")
		}
		return bad(fmt.Sprintf("Unexpected %s.", strings.ToLower(n.Token.Type.String())))
	case *ast.ListType:
		if len(n.List) == 0 {
			return cty.EmptyTupleVal, nil
		}
		vals := make([]cty.Value, 0, len(n.List))
		var diags hcl.Diagnostics
		for _, e := range n.List {
			v, d := b.value(e)
			diags = append(diags, d...)
			vals = append(vals, v)
		}
		if diags.HasErrors() {
			return cty.DynamicVal, diags
		}
		return cty.TupleVal(vals), nil
	case *ast.ObjectType:
		attrs := map[string]cty.Value{}
		var diags hcl.Diagnostics
		for _, it := range n.List.Items {
			if len(it.Keys) == 0 || it.Val == nil {
				continue
			}
			v, d := b.value(b.itemValue(it).node)
			diags = append(diags, d...)
			attrs[keyName(it.Keys[0])] = v
		}
		if diags.HasErrors() {
			return cty.DynamicVal, diags
		}
		if len(attrs) == 0 {
			return cty.EmptyObjectVal, nil
		}
		return cty.ObjectVal(attrs), nil
	}
	return bad("Unexpected value.")
}

// contentHCL1 is content for an HCL 1 body. HCL 1 does not tell an
// argument from a block the way HCL 2 does: `name { ... }`, `name = { ... }`
// and `name = [{ ... }, ...]` all write blocks, a key may be repeated (the
// last value wins, lists append, maps merge), so keys are sorted out by
// what the schema expects.
func (d *decoder) contentHCL1(hb *h1Body, c *content, path string, known map[string]key, keys []key, rejects map[string]string) {
	names, groups := hb.grouped()
	for _, n := range names {
		items := groups[n]
		field := join(path, n)
		first := items[0]
		nameRng := hb.f.nodeRange(first.Keys[0])
		if msg, ok := rejects[n]; ok {
			d.errf(nameRng, field, "%s", msg)
			continue
		}
		k, ok := known[n]
		if !ok {
			d.unknown(nameRng, path, n, keys)
			continue
		}
		switch k.kind {
		case kAttr:
			var args []*ast.ObjectItem
			for _, it := range items {
				_, isObj := it.Val.(*ast.ObjectType)
				if len(it.Keys) > 1 || (isObj && !assigned(it)) {
					d.errf(hb.f.nodeRange(it.Keys[0]), field, "must be an argument (%s = ...), not a block", n)
					continue
				}
				args = append(args, it)
			}
			if len(args) > 0 {
				c.attrs[n] = hb.combine(args)
			}
		case kMap:
			var args, blocks []*ast.ObjectItem
			for _, it := range items {
				if len(it.Keys) > 1 {
					d.errf(hb.f.nodeRange(it.Keys[1]), field, "this block takes no labels")
					continue
				}
				if assigned(it) {
					args = append(args, it)
				} else {
					blocks = append(blocks, it)
				}
			}
			switch {
			case len(args) > 0 && len(blocks) > 0:
				d.errf(hb.f.nodeRange(blocks[0].Keys[0]), field, "is set twice: as an argument at %s and as a block", posString(hb.f.nodeRange(args[0].Keys[0])))
			case len(args) > 0:
				c.attrs[n] = hb.combine(args)
			case len(blocks) > 0:
				// Several blocks merge into one map, as in CTS.
				a := hb.combine(blocks)
				o, _ := a.Expr.(*h1Expr).node.(*ast.ObjectType)
				blk := hb.block(blocks[0].Keys[0], nil, hb.objectBody(o))
				c.blocks[n] = append(c.blocks[n], blk)
			}
		case kBlock:
			for _, it := range items {
				if extra := len(it.Keys) - 1; extra > k.labels && !assigned(it) {
					// Labels written in the block's header are labels.
					d.errf(hb.f.nodeRange(it.Keys[0]), field, "%s", labelMsg(k, extra))
					continue
				}
				bs, ok := hb.blocks(it, k.labels)
				if !ok {
					d.errf(hb.f.nodeRange(it.Keys[0]), field, "must be a block (%s { ... }), not an argument", blockHeader(k))
					continue
				}
				for _, b := range bs {
					if len(b.Labels) != k.labels {
						d.errf(b.TypeRange, field, "%s", labelMsg(k, len(b.Labels)))
						continue
					}
					c.blocks[n] = append(c.blocks[n], b)
				}
			}
		}
	}
}

// asHCL2 reads the source text of an HCL 1 value as an HCL 2 expression
// (a task's variables are HCL expression text, whatever syntax the file
// is read with). A value with no text of its own, a heredoc, or text that
// HCL 2 cannot read, stays as it is.
func asHCL2(e hcl.Expression) hcl.Expression {
	h, ok := e.(*h1Expr)
	if !ok || h.synthetic || h.heredoc() {
		return e
	}
	r := h.Range()
	src := h.body.f.src
	if r.Start.Byte < 0 || r.End.Byte > len(src) || r.Start.Byte >= r.End.Byte {
		return e
	}
	x, diags := hclsyntax.ParseExpression(src[r.Start.Byte:r.End.Byte], r.Filename, r.Start)
	if diags.HasErrors() {
		return e
	}
	return x
}
