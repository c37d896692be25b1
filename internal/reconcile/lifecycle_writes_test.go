package reconcile

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestLifecycleWritesStayInLifecycle checks that a task's lifecycle state
// (entry.lc: its phase, what is due, its timer, its failures) is written in
// lifecycle.go only: everything else moves a task by events (stepLocked)
// and the functions next to it, so that the table of transition is the
// whole story.
func TestLifecycleWritesStayInLifecycle(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if name == "lifecycle.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		bad := func(x ast.Expr, what string) {
			if touchesLC(x) {
				t.Errorf("%s: %s of a task's lifecycle state outside lifecycle.go", fset.Position(x.Pos()), what)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, x := range n.Lhs {
					bad(x, "assignment")
				}
			case *ast.IncDecStmt:
				bad(n.X, "increment")
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					bad(n.X, "address")
				}
			}
			return true
		})
	}
}

// touchesLC reports whether x selects through a field named lc.
func touchesLC(x ast.Expr) bool {
	for {
		switch y := x.(type) {
		case *ast.SelectorExpr:
			if y.Sel.Name == "lc" {
				return true
			}
			x = y.X
		case *ast.IndexExpr:
			x = y.X
		case *ast.StarExpr:
			x = y.X
		case *ast.ParenExpr:
			x = y.X
		default:
			return false
		}
	}
}

// TestReconcilerKeepsNoState checks that the reconciler (reconciler.go,
// and its methods wherever they are, e.g. the gated run in gates.go)
// neither takes the controller's lock nor touches a task's lifecycle or
// held-plan state, and has no way back into the controller (no field of
// the Controller's type or of an interface of the package): it reads the
// snapshot in its job and returns an outcome, which the controller's one
// applier (commitLocked) commits under its lock.
func TestReconcilerKeepsNoState(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	methods := 0
	ifaces := map[string]bool{"Controller": true}
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if _, ok := ts.Type.(*ast.InterfaceType); ok {
					ifaces[ts.Name.Name] = true
				}
			}
			return true
		})
	}
	for _, f := range parsed {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		for _, d := range f.Decls {
			if gd, ok := d.(*ast.GenDecl); ok {
				for _, sp := range gd.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "reconciler" {
						continue
					}
					for _, fld := range ts.Type.(*ast.StructType).Fields.List {
						x := fld.Type
						if st, ok := x.(*ast.StarExpr); ok {
							x = st.X
						}
						if id, ok := x.(*ast.Ident); ok && ifaces[id.Name] {
							t.Errorf("%s: the reconciler has a field of type %s: a way back into the controller", fset.Position(fld.Pos()), id.Name)
						}
					}
				}
			}
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil {
				continue
			}
			star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			recv, _ := star.X.(*ast.Ident)
			switch {
			case recv == nil:
			case recv.Name == "Controller" && name == "reconciler.go":
				t.Errorf("%s: %s is a method of the Controller in reconciler.go", fset.Position(fn.Pos()), fn.Name.Name)
			case recv.Name == "reconciler":
				methods++
				ast.Inspect(fn, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok && (sel.Sel.Name == "mu" || sel.Sel.Name == "lc" || sel.Sel.Name == "gates") {
						t.Errorf("%s: the reconciler (%s) uses .%s", fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
					}
					return true
				})
			}
		}
	}
	if methods < 5 {
		t.Fatalf("found %d methods of the reconciler: the check looks in the wrong place", methods)
	}
}

// TestNoTypeHasMoreThan30Methods keeps the package's parts apart: a type
// with more than 30 methods has taken on more than one responsibility
// (docs/architecture.md names the parts).
func TestNoTypeHasMoreThan30Methods(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	count := map[string]int{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil {
				continue
			}
			x := fn.Recv.List[0].Type
			if st, ok := x.(*ast.StarExpr); ok {
				x = st.X
			}
			if id, ok := x.(*ast.Ident); ok {
				count[id.Name]++
			}
		}
	}
	if count["Controller"] == 0 {
		t.Fatal("no method of the Controller found: the check looks in the wrong place")
	}
	for typ, n := range count {
		if n > 30 {
			t.Errorf("%s has %d methods, more than 30", typ, n)
		}
	}
}
