package archdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false,
	"rewrite the package table of docs/architecture.md from the code (and the drawing, when it is wrong)")

const (
	docPath    = "docs/architecture.md"
	updateHint = "go test ./internal/archdoc -run TestPackagesInDocs -update-docs"
	drawBegin  = "<!-- package layers: checked against the code by TestPackagesInDocs (" + updateHint + ") -->"
	drawEnd    = "<!-- end of package layers -->"
	tableBegin = "<!-- package imports: checked against the code by TestPackagesInDocs (" + updateHint + ") -->"
	tableEnd   = "<!-- end of package imports -->"
	tableHead  = "| package | what it is for | imports (of ctsync's packages) |\n|---|---|---|\n"
	none       = "—"
)

// pkg is one package of the module as `go list` sees it.
type pkg struct {
	name    string            // its path in the module without "internal/": "ha", "api/client", "cmd/ctsync"
	purpose string            // the first sentence of its doc comment, without "Package x"
	dir     string            // its directory
	rel     string            // its directory in the module
	files   []string          // its Go files (not the tests)
	imports []string          // the names of the module's packages it imports (not from tests), sorted
	paths   map[string]string // name -> import path, of those
}

// TestPackagesInDocs keeps the package picture of docs/architecture.md
// true: the table lists every package of the module and, for each, exactly
// the module's packages its (non-test) files import; the drawing shows
// every package once, each on a line above all the packages it imports.
func TestPackagesInDocs(t *testing.T) {
	root := moduleRoot(t)
	pkgs := listPackages(t, root)
	path := filepath.Join(root, docPath)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	ti, tj, tline := section(t, doc, tableBegin, tableEnd)
	rows, problems := parseTable(doc[ti:tj], tline)
	problems = append(problems, checkTable(pkgs, rows)...)

	di, dj, dline := section(t, doc, drawBegin, drawEnd)
	drawn, dproblems := parseDrawing(doc[di:dj], dline, pkgs)
	dproblems = append(dproblems, checkDrawing(pkgs, drawn)...)

	if *updateDocs && len(problems)+len(dproblems) > 0 {
		if dj > ti {
			t.Fatalf("%s: the package drawing must come before the package table", docPath)
		}
		table := tableBegin + "\n\n" + renderTable(pkgs, rows)
		drawing := doc[di:dj]
		if len(dproblems) > 0 {
			drawing = drawBegin + "\n\n" + renderDrawing(pkgs)
		}
		out := doc[:di] + drawing + doc[dj:ti] + table + doc[tj:]
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s rewritten (the table%s); check its purposes and notes", docPath,
			map[bool]string{true: " and the drawing", false: ""}[len(dproblems) > 0])
		return
	}
	for _, p := range append(problems, dproblems...) {
		t.Error(p)
	}
	if len(problems)+len(dproblems) > 0 {
		t.Logf("to rewrite the table (and a wrong drawing) from the code: %s", updateHint)
	}
}

// moduleRoot is the directory of the module's go.mod, above the test's.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// listPackages runs `go list` (the go on PATH) on every package of the
// module in root.
func listPackages(t *testing.T, root string) map[string]*pkg {
	cmd := exec.Command("go", "list", "-json=ImportPath,Doc,Dir,GoFiles,Imports,Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.String())
	}
	type listed struct {
		ImportPath, Doc, Dir string
		GoFiles, Imports     []string
		Module               struct{ Path string }
	}
	var all []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		all = append(all, l)
	}
	if len(all) == 0 {
		t.Fatal("go list ./... listed no package")
	}
	mod := all[0].Module.Path
	short := func(importPath string) (string, bool) {
		rest, ok := strings.CutPrefix(importPath, mod+"/")
		if !ok {
			return "", false
		}
		return strings.TrimPrefix(rest, "internal/"), true
	}
	pkgs := map[string]*pkg{}
	for _, l := range all {
		name, ok := short(l.ImportPath)
		if !ok {
			t.Fatalf("go list: %s is outside module %s", l.ImportPath, mod)
		}
		rel, err := filepath.Rel(root, l.Dir)
		if err != nil {
			t.Fatal(err)
		}
		// go test caches a passing result by the files the test looked
		// at; go list's reads are not among them, so look at the
		// directories and Go files here: a changed import runs it again.
		for _, f := range append([]string{"."}, l.GoFiles...) {
			if _, err := os.Stat(filepath.Join(l.Dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		p := &pkg{name: name, dir: l.Dir, rel: filepath.ToSlash(rel), files: l.GoFiles, purpose: purposeOf(l.Doc), paths: map[string]string{}}
		for _, imp := range l.Imports {
			if n, ok := short(imp); ok {
				p.imports = append(p.imports, n)
				p.paths[n] = imp
			}
		}
		slices.Sort(p.imports)
		pkgs[name] = p
	}
	return pkgs
}

// purposeOf is a package's doc comment's first sentence without "Package
// x (is)" / "Command x" and its full stop ("" without a doc comment).
func purposeOf(doc string) string {
	f := strings.Fields(doc)
	if len(f) > 2 && (f[0] == "Package" || f[0] == "Command") {
		f = f[2:]
	}
	if len(f) > 0 && f[0] == "is" {
		f = f[1:]
	}
	s := strings.TrimRight(strings.Join(f, " "), ":.")
	return strings.ReplaceAll(s, "|", "/")
}

// importedAt is where a file of p imports the module's package name, as
// " (file:line)" for a message ("" when none is found).
func (p *pkg) importedAt(name string) string {
	fset := token.NewFileSet()
	for _, file := range p.files {
		f, err := parser.ParseFile(fset, filepath.Join(p.dir, file), nil, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, is := range f.Imports {
			if path, _ := strconv.Unquote(is.Path.Value); path == p.paths[name] {
				return fmt.Sprintf(" (%s/%s:%d)", p.rel, file, fset.Position(is.Pos()).Line)
			}
		}
	}
	return ""
}

// section finds the text between begin and end in doc: its offsets and
// the line (1-based) of begin.
func section(t *testing.T, doc, begin, end string) (int, int, int) {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: the markers %q and %q are missing (or out of order)", docPath, begin, end)
	}
	return i, j, strings.Count(doc[:i], "\n") + 1
}

// row is one line of the package table.
type row struct {
	line          int
	name, purpose string
	imports       []string
}

var rowRE = regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]*) \\| ([^|]*) \\|$")

// parseTable reads the table's rows from its section (which starts at line
// first of the page).
func parseTable(sec string, first int) (map[string]row, []string) {
	rows := map[string]row{}
	var problems []string
	for n, line := range strings.Split(sec, "\n")[1:] {
		at := first + 1 + n
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "| package |") || strings.HasPrefix(line, "|---") {
			continue
		}
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			problems = append(problems, fmt.Sprintf("%s:%d: not a row of the package table (| `name` | what it is for | a, b |): %q", docPath, at, line))
			continue
		}
		r := row{line: at, name: m[1], purpose: strings.TrimSpace(m[2])}
		if imps := strings.TrimSpace(m[3]); imps != none {
			for _, imp := range strings.Split(imps, ",") {
				r.imports = append(r.imports, strings.TrimSpace(imp))
			}
		}
		if prev, dup := rows[r.name]; dup {
			problems = append(problems, fmt.Sprintf("%s:%d: package %s has a second row (the first is line %d): remove one", docPath, at, r.name, prev.line))
			continue
		}
		rows[r.name] = r
	}
	return rows, problems
}

// checkTable compares the table's rows with the code's packages.
func checkTable(pkgs map[string]*pkg, rows map[string]row) []string {
	var problems []string
	for _, name := range sortedKeys(rows) {
		r := rows[name]
		p := pkgs[name]
		if p == nil {
			problems = append(problems, fmt.Sprintf("%s:%d: the table has a row for %s, which is no package of the module: remove the line (or fix the name)", docPath, r.line, name))
			continue
		}
		if r.purpose == "" || strings.HasPrefix(r.purpose, "TODO") {
			problems = append(problems, fmt.Sprintf("%s:%d: say in the row of %s what it is for (its doc comment: %q)", docPath, r.line, name, p.purpose))
		}
		fix := fmt.Sprintf("make the line | `%s` | %s | %s |", name, r.purpose, importsCell(p.imports))
		for _, imp := range p.imports {
			if !slices.Contains(r.imports, imp) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s imports %s%s, which the table does not list: %s", docPath, r.line, name, imp, p.importedAt(imp), fix))
			}
		}
		for _, imp := range r.imports {
			if !slices.Contains(p.imports, imp) {
				problems = append(problems, fmt.Sprintf("%s:%d: the table says %s imports %s; no (non-test) file of it does: %s", docPath, r.line, name, imp, fix))
			}
		}
	}
	for _, name := range sortedKeys(pkgs) {
		if _, ok := rows[name]; !ok {
			p := pkgs[name]
			purpose := p.purpose
			if purpose == "" {
				purpose = "<what it is for>"
			}
			problems = append(problems, fmt.Sprintf("%s: package %s is not in the package table: add the line | `%s` | %s | %s |", docPath, name, name, purpose, importsCell(p.imports)))
		}
	}
	return problems
}

func importsCell(imports []string) string {
	if len(imports) == 0 {
		return none
	}
	return strings.Join(imports, ", ")
}

// renderTable is the table from the code, keeping the rows there are in
// their order with their purposes; the rows of new packages come last, from
// the top of the layers down.
func renderTable(pkgs map[string]*pkg, rows map[string]row) string {
	var order []string
	for _, name := range sortedKeys(rows) {
		if pkgs[name] != nil {
			order = append(order, name)
		}
	}
	slices.SortFunc(order, func(a, b string) int { return rows[a].line - rows[b].line })
	for _, name := range tableOrder(pkgs) {
		if _, ok := rows[name]; !ok {
			order = append(order, name)
		}
	}
	var b strings.Builder
	b.WriteString(tableHead)
	for _, name := range order {
		p := pkgs[name]
		purpose := p.purpose
		if r, ok := rows[name]; ok && r.purpose != "" {
			purpose = r.purpose
		}
		if purpose == "" {
			purpose = "TODO: what it is for"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, purpose, importsCell(p.imports))
	}
	b.WriteString("\n")
	return b.String()
}

// tableOrder lists the packages from the top of the layers down (as the
// drawing does), by name within a layer.
func tableOrder(pkgs map[string]*pkg) []string {
	layers := layersOf(pkgs)
	names := sortedKeys(pkgs)
	slices.SortStableFunc(names, func(a, b string) int { return layers[b] - layers[a] })
	return names
}

// notes are the drawing's words for humans, in brackets; the rest of a
// line is package names and the drawing's characters.
var notes = regexp.MustCompile(`\[[^\]]*\]`)

// parseDrawing reads which line of the drawing (counting only the lines
// that name packages, from the top) each package is on.
func parseDrawing(sec string, first int, pkgs map[string]*pkg) (map[string]drawnAt, []string) {
	drawn := map[string]drawnAt{}
	var problems []string
	layer := 0
	for n, line := range strings.Split(sec, "\n")[1:] {
		at := first + 1 + n
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			continue
		}
		words := strings.FieldsFunc(notes.ReplaceAllString(line, ""), func(r rune) bool {
			return r == ' ' || r == '\t' || r == ',' || strings.ContainsRune("·│─►▼◄┬┴┼├┤┌┐└┘", r)
		})
		if len(words) == 0 {
			continue
		}
		layer++
		for _, w := range words {
			if pkgs[w] == nil {
				problems = append(problems, fmt.Sprintf("%s:%d: the drawing names %q, which is no package of the module: fix the name or put words for humans in [brackets]", docPath, at, w))
				continue
			}
			if prev, dup := drawn[w]; dup {
				problems = append(problems, fmt.Sprintf("%s:%d: the drawing shows %s twice (also line %d): keep one", docPath, at, w, prev.line))
				continue
			}
			drawn[w] = drawnAt{line: at, layer: layer}
		}
	}
	return drawn, problems
}

type drawnAt struct{ line, layer int }

// checkDrawing checks that the drawing shows every package, each above
// every package it imports.
func checkDrawing(pkgs map[string]*pkg, drawn map[string]drawnAt) []string {
	var problems []string
	importers := map[string][]string{}
	for _, name := range sortedKeys(pkgs) {
		for _, imp := range pkgs[name].imports {
			importers[imp] = append(importers[imp], name)
		}
	}
	for _, name := range sortedKeys(pkgs) {
		p := pkgs[name]
		d, ok := drawn[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: package %s is not in the drawing: add it on a line below those that import it (%s) and above those it imports (%s)",
				docPath, name, importsCell(importers[name]), importsCell(p.imports)))
			continue
		}
		for _, imp := range p.imports {
			if di, ok := drawn[imp]; ok && di.layer <= d.layer {
				problems = append(problems, fmt.Sprintf("%s:%d: %s imports %s%s, but the drawing does not put %s below it (line %d): each line may import only the lines below it; move %s down or %s up",
					docPath, d.line, name, imp, p.importedAt(imp), imp, di.line, imp, name))
			}
		}
	}
	return problems
}

// layersOf is each package's height: 0 for a package that imports none of
// the module's, else one more than the highest it imports.
func layersOf(pkgs map[string]*pkg) map[string]int {
	layers := map[string]int{}
	var height func(name string, seen map[string]bool) int
	height = func(name string, seen map[string]bool) int {
		if h, ok := layers[name]; ok {
			return h
		}
		if seen[name] { // an import cycle: go build refuses it anyway
			return 0
		}
		seen[name] = true
		h := 0
		for _, imp := range pkgs[name].imports {
			if pkgs[imp] != nil {
				h = max(h, height(imp, seen)+1)
			}
		}
		layers[name] = h
		return h
	}
	for name := range pkgs {
		height(name, map[string]bool{})
	}
	return layers
}

// renderDrawing draws the packages by layers from the code, the top first.
func renderDrawing(pkgs map[string]*pkg) string {
	layers := layersOf(pkgs)
	top := 0
	for _, h := range layers {
		top = max(top, h)
	}
	var b strings.Builder
	b.WriteString("```\n")
	for h := top; h >= 0; h-- {
		var line []string
		for _, name := range sortedKeys(pkgs) {
			if layers[name] == h {
				line = append(line, name)
			}
		}
		b.WriteString(strings.Join(line, " · ") + "\n")
		if h > 0 {
			b.WriteString("   ▼\n")
		}
	}
	b.WriteString("```\n\n")
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestChecksFindMismatches feeds the checks a made-up module and page: each
// kind of mismatch is reported, naming the package and the import.
func TestChecksFindMismatches(t *testing.T) {
	pkgs := map[string]*pkg{
		"cli":   {name: "cli", imports: []string{"store", "task"}},
		"store": {name: "store", imports: []string{"task"}},
		"task":  {name: "task"},
		"new":   {name: "new", purpose: "what is new"},
	}
	table := tableBegin + "\n\n" + tableHead +
		"| `cli` | the command line | store, gone |\n" + // lacks task; lists gone
		"| `store` | the store | task, cli |\n" + // cli is not imported
		"| `task` |  | — |\n" + // no purpose
		"| `gone` | a removed package | — |\n"
	rows, problems := parseTable(table, 1)
	problems = append(problems, checkTable(pkgs, rows)...)
	drawing := drawBegin + "\n\n```\ncli     [notes are skipped]\n   ▼\ntask\n   ▼\nstore · nosuch\n```\n"
	drawn, dproblems := parseDrawing(drawing, 1, pkgs)
	problems = append(problems, dproblems...)
	problems = append(problems, checkDrawing(pkgs, drawn)...)
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"cli imports task, which the table does not list: make the line | `cli` | the command line | store, task |",
		"the table says cli imports gone; no (non-test) file of it does",
		"the table says store imports cli; no (non-test) file of it does",
		"say in the row of task what it is for",
		"the table has a row for gone, which is no package of the module",
		"package new is not in the package table: add the line | `new` | what is new | — |",
		`the drawing names "nosuch", which is no package of the module`,
		"store imports task, but the drawing does not put task below it",
		"package new is not in the drawing",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem says %q; the problems:\n%s", want, all)
		}
	}
	if len(problems) != 9 {
		t.Errorf("%d problems, want 9:\n%s", len(problems), all)
	}
}
