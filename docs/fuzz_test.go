package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCIFuzzesEveryTarget: .ci/run runs scripts/fuzz, and scripts/fuzz
// finds every fuzz target of the repository (every test-file function
// FuzzX(f *testing.F), read here with the Go parser rather than by the
// script's own search), so that a new target is fuzzed in CI without
// anyone listing it.
func TestCIFuzzesEveryTarget(t *testing.T) {
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	runs := false
	for _, line := range strings.Split(string(ci), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") && strings.Contains(line, "scripts/fuzz") && !strings.HasPrefix(line, "step ") {
			runs = true
		}
	}
	if !runs {
		t.Fatal(".ci/run does not run scripts/fuzz")
	}

	var want []string
	fset := token.NewFileSet()
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Fuzz") || !takesTestingF(fn) {
				continue
			}
			want = append(want, "./"+filepath.ToSlash(strings.TrimPrefix(filepath.Dir(path), "../"))+"/ "+fn.Name.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) == 0 {
		t.Fatal("found no fuzz target in the repository")
	}

	cmd := exec.Command("bash", "scripts/fuzz", "-list")
	cmd.Dir = ".."
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/fuzz -list: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("scripts/fuzz does not fuzz %s", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("scripts/fuzz lists %q, which is no fuzz target", g)
		}
	}
	t.Logf("CI fuzzes %d targets", len(want))
}

// takesTestingF reports whether fn's one parameter is a *testing.F.
func takesTestingF(fn *ast.FuncDecl) bool {
	params := fn.Type.Params.List
	if len(params) != 1 || len(params[0].Names) > 1 {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "testing" && sel.Sel.Name == "F"
}
