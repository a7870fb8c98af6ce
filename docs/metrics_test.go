package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// metricsReference is the one page that lists every queengate_* family.
const metricsReference = "metrics.md"

// family is a metric family: its name, its label names in order, and where
// it is defined.
type family struct {
	name   string
	labels []string
	// labelsKnown is false for a family from an *Opts literal, whose label
	// names are given elsewhere (a Vec's constructor).
	labelsKnown bool
	where       string
}

// TestMetricsReferenceIsComplete fails for every queengate_* family the
// module's code registers that docs/metrics.md does not list, every family
// it lists that the code does not register, every family whose labels
// differ, and every family whose type column does not follow the _total
// naming rule.
func TestMetricsReferenceIsComplete(t *testing.T) {
	registered, err := registeredFamilies("..")
	if err != nil {
		t.Fatal(err)
	}
	// Canaries: one family of each kind of definition site, so that an
	// extraction that finds nothing cannot pass.
	for _, canary := range []string{"queengate_requests_total", "queengate_gateway_role", "queengate_cell_tenancy_contradicted"} {
		if _, ok := registered[canary]; !ok {
			t.Errorf("the extraction did not find %s: it no longer sees every definition (or the family is gone; then update this list)", canary)
		}
	}
	doc, err := os.ReadFile(metricsReference)
	if err != nil {
		t.Fatal(err)
	}
	documented, err := documentedFamilies(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range compareFamilies(registered, documented) {
		t.Error(problem)
	}
}

// TestMetricsReferenceMismatchIsReported checks that the comparison finds
// each kind of mismatch.
func TestMetricsReferenceMismatchIsReported(t *testing.T) {
	registered := map[string]family{
		"queengate_a_total": {name: "queengate_a_total", labels: []string{"x"}, labelsKnown: true, where: "a.go:1"},
		"queengate_b":       {name: "queengate_b", labelsKnown: true, where: "b.go:1"},
		"queengate_c":       {name: "queengate_c", labels: []string{"y", "z"}, labelsKnown: true, where: "c.go:1"},
	}
	documented := map[string]documentedFamily{
		"queengate_a_total": {labels: []string{"x"}, kind: "gauge"},
		"queengate_c":       {labels: []string{"y"}, kind: "gauge"},
		"queengate_d":       {kind: "gauge"},
	}
	problems := strings.Join(compareFamilies(registered, documented), "\n")
	for _, want := range []string{"queengate_b (b.go:1) is registered but not in", "queengate_d is in", "queengate_c has labels [y z]", "queengate_a_total is documented as a gauge"} {
		if !strings.Contains(problems, want) {
			t.Errorf("problems lack %q:\n%s", want, problems)
		}
	}
}

// TestDocsNameOnlyRegisteredMetrics fails for a queengate_* name in any
// page of docs/ or the README that is not a registered family: a renamed
// metric left behind in prose, or one that never existed.
func TestDocsNameOnlyRegisteredMetrics(t *testing.T) {
	registered, err := registeredFamilies("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "prometheus-rules.yml", "grafana-dashboard.json")
	name := regexp.MustCompile(`\bqueengate_[a-z0-9_]*[a-z0-9]\b`)
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllString(string(b), -1) {
			if _, ok := registered[m]; !ok && !strings.HasSuffix(m, "_") && !notAMetric[m] {
				t.Errorf("%s names %s, which the code does not register", page, m)
			}
		}
	}
}

// notAMetric are queengate_* words in the docs that are other things.
var notAMetric = map[string]bool{
	"queengate_bench":  true, // the benchmark's database
	"queengate_leader": true, // deployment.md's keepalived vrrp_script
}

// registeredFamilies finds every queengate_* family defined in the
// module's non-test Go files under root: the name given to
// prometheus.NewDesc (with its label list) or the Name of a prometheus
// *Opts literal.
func registeredFamilies(root string) (map[string]family, error) {
	out := map[string]family{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); path != root && (base == "testdata" || base == "node_modules" || strings.HasPrefix(base, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "NewDesc" || len(n.Args) < 3 {
					return true
				}
				name, ok := stringLit(n.Args[0])
				if !ok || !strings.HasPrefix(name, "queengate_") {
					return true
				}
				out[name] = family{name: name, labels: stringList(n.Args[2]), labelsKnown: true, where: position(fset, n.Pos())}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if key, isIdent := kv.Key.(*ast.Ident); !ok || !isIdent || key.Name != "Name" {
						continue
					}
					if name, ok := stringLit(kv.Value); ok && strings.HasPrefix(name, "queengate_") {
						out[name] = family{name: name, where: position(fset, n.Pos())}
					}
				}
			}
			return true
		})
		return nil
	})
	return out, err
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// stringList returns the literal elements of []string{...}; nil for nil or
// anything else.
func stringList(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if s, ok := stringLit(el); ok {
			out = append(out, s)
		}
	}
	return out
}

func position(fset *token.FileSet, pos token.Pos) string {
	p := fset.Position(pos)
	return fmt.Sprintf("%s:%d", strings.TrimPrefix(filepath.ToSlash(p.Filename), "../"), p.Line)
}

type documentedFamily struct {
	labels []string
	kind   string
}

// documentedFamilies reads the rows of the reference's families table:
// | `name` | type | `label`, `label` | ...
func documentedFamilies(doc string) (map[string]documentedFamily, error) {
	row := regexp.MustCompile("(?m)^\\| `(queengate_[a-z0-9_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]documentedFamily{}
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("%s: %s is listed twice", metricsReference, m[1])
		}
		var labels []string
		for _, l := range label.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		out[m[1]] = documentedFamily{labels: labels, kind: m[2]}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no family rows", metricsReference)
	}
	return out, nil
}

func compareFamilies(registered map[string]family, documented map[string]documentedFamily) []string {
	var problems []string
	for name, f := range registered {
		d, ok := documented[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s (%s) is registered but not in %s", name, f.where, metricsReference))
			continue
		}
		if f.labelsKnown && !slices.Equal(f.labels, d.labels) {
			problems = append(problems, fmt.Sprintf("%s has labels %v in %s but %v in %s", name, f.labels, f.where, d.labels, metricsReference))
		}
		want := "gauge"
		if strings.HasSuffix(name, "_total") {
			want = "counter"
		}
		if d.kind != want {
			problems = append(problems, fmt.Sprintf("%s is documented as a %s, but its name says %s", name, d.kind, want))
		}
	}
	for name := range documented {
		if _, ok := registered[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s is in %s but the code does not register it", name, metricsReference))
		}
	}
	sort.Strings(problems)
	return problems
}
