package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pipelinePackages are the packages pipeline.md names code in, by the name
// it writes them with.
var pipelinePackages = map[string]string{
	"caddymodule": "../caddymodule", "tenancy": "../tenancy", "limits": "../limits",
	"meter": "../meter", "harden": "../internal/harden", "console": "../console", "leader": "../leader",
}

// declaredNames are the names a package declares: functions, methods,
// types, variables, constants and struct fields.
func declaredNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch d := n.(type) {
			case *ast.FuncDecl:
				names[d.Name.Name] = true
			case *ast.TypeSpec:
				names[d.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range d.Names {
					names[id.Name] = true
				}
			case *ast.Field:
				for _, id := range d.Names {
					names[id.Name] = true
				}
			case *ast.AssignStmt: // local names the page may point at
				if d.Tok == token.DEFINE {
					for _, e := range d.Lhs {
						if id, ok := e.(*ast.Ident); ok {
							names[id.Name] = true
						}
					}
				}
			}
			return true
		})
	}
	if len(names) == 0 {
		t.Fatalf("no declarations in %s", dir)
	}
	return names
}

// codeReferenceProblems checks the code spans of a map of the code: paths
// must exist, pkg.Name must be declared in pkg, Type.member and camelCase
// names in caddymodule or one of the packages.
func codeReferenceProblems(t *testing.T, text string) []string {
	t.Helper()
	decls := map[string]map[string]bool{}
	for pkg, dir := range pipelinePackages {
		decls[pkg] = declaredNames(t, dir)
	}
	anywhere := func(name string) bool {
		for _, d := range decls {
			if d[name] {
				return true
			}
		}
		return false
	}
	goPath := regexp.MustCompile(`^[a-z][a-z0-9_]*(/[a-z][a-z0-9_]*)*(/[a-z0-9_]+\.go)?$`)
	selector := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)+$`)
	camel := regexp.MustCompile(`^[a-z]+[A-Z][A-Za-z0-9]*$`)
	// The broker's own names (query parameters) are not code.
	brokerWords := map[string]bool{"autoAck": true}
	var problems []string
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(text, -1) {
		span := m[1]
		switch {
		case brokerWords[span]:
		case regexp.MustCompile(`^[a-z0-9_]+\.go$`).MatchString(span):
			if _, err := os.Stat(filepath.Join("../caddymodule", span)); err != nil {
				problems = append(problems, "`"+span+"`: no such file in caddymodule")
			}
		case strings.Contains(span, "/") && goPath.MatchString(span):
			if _, err := os.Stat(filepath.Join("..", span)); err != nil {
				problems = append(problems, "`"+span+"`: no such file or directory")
			}
		case selector.MatchString(span):
			parts := strings.Split(span, ".")
			if d, ok := decls[parts[0]]; ok {
				if !d[parts[1]] {
					problems = append(problems, "`"+span+"`: "+parts[0]+" declares no "+parts[1])
				}
				continue
			}
			for _, p := range parts {
				if !anywhere(p) {
					problems = append(problems, "`"+span+"`: nothing declares "+p)
				}
			}
		case camel.MatchString(span):
			if !anywhere(span) {
				problems = append(problems, "`"+span+"`: nothing declares it")
			}
		}
	}
	return problems
}

// TestPipelineNamesExistingCode: every function, type, field and file
// pipeline.md points at is in the code.
func TestPipelineNamesExistingCode(t *testing.T) {
	b, err := os.ReadFile("pipeline.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "`caddymodule/"); n < 10 {
		t.Fatalf("pipeline.md names %d caddymodule files: not the page this test knows", n)
	}
	for _, p := range codeReferenceProblems(t, string(b)) {
		t.Errorf("pipeline.md: %s", p)
	}
	// The check can fail.
	if got := codeReferenceProblems(t, "`caddymodule/nosuch.go` `tenancy.NoSuchThing` `serveHealthz` `Gateway.ServeHTTP`"); len(got) != 3 {
		t.Errorf("the check found %v in three wrong names and a right one", got)
	}
}
