package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/queengate/queengate/controlplane"
)

// sourceDir holds the Caddyfile parsers and the configuration structs.
const sourceDir = "../caddymodule"

// referenceFile is the configuration reference the options must be in.
const referenceFile = "configuration.md"

// name is something the configuration reference must mention, and where in
// the source it comes from.
type name struct {
	kind  string // "option", "module", "directive", "JSON field"
	value string
	where string // file:line (function or type)
}

func (n name) String() string { return fmt.Sprintf("%s `%s` (%s)", n.kind, n.value, n.where) }

// TestConfigurationReferenceIsComplete fails for every Caddyfile option,
// module, directive, global option and JSON configuration field of
// caddymodule that docs/configuration.md does not mention as `name`.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	names, err := configurationNames(sourceDir)
	if err != nil {
		t.Fatal(err)
	}
	// Canaries: one option of each parser, so that a change that makes the
	// extraction find nothing cannot pass unnoticed.
	found := map[string]bool{}
	for _, n := range names {
		if n.kind == "option" {
			found[n.value] = true
		}
	}
	for _, canary := range []string{"database_url", "revocation_strict", "role_claim", "upstream_timeout", "server_name", "shield"} {
		if !found[canary] {
			t.Errorf("the option extraction did not find %q in %s: it no longer sees every parser (or the option is gone; then update this list)", canary, sourceDir)
		}
	}
	doc, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range missingFrom(string(doc), names) {
		t.Errorf("%s is not documented in docs/%s (write it as `%s`)", n, referenceFile, n.value)
	}
	// The CLI's environment variable.
	if !strings.Contains(string(doc), "`"+controlplane.EnvDatabaseURL+"`") {
		t.Errorf("environment variable `%s` is not documented in docs/%s", controlplane.EnvDatabaseURL, referenceFile)
	}
}

// TestMissingOptionIsReported proves the check above can fail: a reference
// that mentions every extracted name but one must be reported as lacking
// exactly that one, for each option in turn.
func TestMissingOptionIsReported(t *testing.T) {
	names, err := configurationNames(sourceDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, victim := range names {
		if victim.kind != "option" {
			continue
		}
		var doc strings.Builder
		for _, n := range names {
			if n.value != victim.value {
				fmt.Fprintf(&doc, "| `%s` | … |\n", n.value)
			}
		}
		missing := missingFrom(doc.String(), names)
		if len(missing) != 1 || missing[0].value != victim.value {
			t.Errorf("a reference without `%s` reported %v missing, want exactly that option", victim.value, missing)
		}
	}
	if got := missingFrom("", []name{{kind: "option", value: "x"}}); len(got) != 1 {
		t.Fatalf("an empty reference reported %v missing, want the one option", got)
	}
}

// missingFrom returns the names doc does not mention in backquotes, each
// value once.
func missingFrom(doc string, names []name) []name {
	var out []name
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n.value] || strings.Contains(doc, "`"+n.value+"`") {
			continue
		}
		seen[n.value] = true
		out = append(out, n)
	}
	return out
}

// configurationNames reads the Go source of dir (without tests) and
// returns:
//   - the option names of the Caddyfile parsers: the string labels of every
//     `case` of a switch on d.Val() or on opt, in functions whose names
//     start with unmarshal, Unmarshal or parse;
//   - the names the package registers as a Caddyfile directive or global
//     option, and the IDs of its Caddy modules;
//   - the JSON field names of its modules' configuration structs and of the
//     structs those hold.
func configurationNames(dir string) ([]name, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	at := func(pos token.Pos, in string) string {
		p := fset.Position(pos)
		return fmt.Sprintf("%s:%d, %s", filepath.ToSlash(filepath.Join(filepath.Base(filepath.Dir(p.Filename)), filepath.Base(p.Filename))), p.Line, in)
	}

	var names []name
	structs := map[string]*ast.TypeSpec{}
	modules := map[string]bool{} // types with a CaddyModule method
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if _, ok := ts.Type.(*ast.StructType); ok {
							structs[ts.Name.Name] = ts
						}
					}
				}
			case *ast.FuncDecl:
				if d.Body == nil {
					continue
				}
				fn := d.Name.Name
				if fn == "CaddyModule" && d.Recv != nil && len(d.Recv.List) == 1 {
					modules[receiverType(d.Recv.List[0].Type)] = true
					names = append(names, moduleIDs(d, at)...)
				}
				if isParser(fn) {
					names = append(names, caseLabels(d, at)...)
				}
				names = append(names, registrations(d, at)...)
			}
		}
	}
	names = append(names, jsonFields(structs, modules, at)...)
	return names, nil
}

// isParser reports whether a function is one of the Caddyfile parsers.
func isParser(fn string) bool {
	return strings.HasPrefix(strings.ToLower(fn), "unmarshal") || strings.HasPrefix(fn, "parse")
}

// caseLabels returns the string case labels of the option switches in fn.
func caseLabels(fn *ast.FuncDecl, at func(token.Pos, string) string) []name {
	var out []name
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		sw, ok := n.(*ast.SwitchStmt)
		if !ok || !switchesOnOption(sw.Tag) {
			return true
		}
		for _, stmt := range sw.Body.List {
			cc, ok := stmt.(*ast.CaseClause)
			if !ok {
				continue
			}
			for _, e := range cc.List {
				lit, ok := e.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					continue
				}
				out = append(out, name{kind: "option", value: v, where: at(lit.Pos(), "in "+fn.Name.Name)})
			}
		}
		return true
	})
	return out
}

// switchesOnOption reports whether a switch tag is the option being parsed:
// d.Val() (any receiver) or a variable named opt.
func switchesOnOption(tag ast.Expr) bool {
	switch e := tag.(type) {
	case *ast.Ident:
		return e.Name == "opt"
	case *ast.CallExpr:
		sel, ok := e.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Val" && len(e.Args) == 0
	}
	return false
}

// moduleIDs returns the ID of the caddy.ModuleInfo a CaddyModule method
// builds.
func moduleIDs(fn *ast.FuncDecl, at func(token.Pos, string) string) []name {
	var out []name
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "ID" {
			if lit, ok := kv.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					out = append(out, name{kind: "module", value: v, where: at(lit.Pos(), "CaddyModule")})
				}
			}
		}
		return true
	})
	return out
}

// registrations returns the names passed to httpcaddyfile's
// RegisterDirective and RegisterGlobalOption.
func registrations(fn *ast.FuncDecl, at func(token.Pos, string) string) []name {
	var out []name
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		var kind string
		switch sel.Sel.Name {
		case "RegisterDirective":
			kind = "directive"
		case "RegisterGlobalOption":
			kind = "global option"
		default:
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, name{kind: kind, value: v, where: at(lit.Pos(), "in "+fn.Name.Name)})
			}
		}
		return true
	})
	return out
}

// receiverType is the type name of a method receiver (T or *T).
func receiverType(e ast.Expr) string {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// jsonFields returns the JSON names of the exported, tagged fields of the
// module structs, and of the package's structs they hold (directly, by
// pointer, in a slice or as map values).
func jsonFields(structs map[string]*ast.TypeSpec, modules map[string]bool, at func(token.Pos, string) string) []name {
	var out []name
	done := map[string]bool{}
	var visit func(typ string)
	visit = func(typ string) {
		ts, ok := structs[typ]
		if !ok || done[typ] {
			return
		}
		done[typ] = true
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			exported := false
			for _, id := range field.Names {
				exported = exported || id.IsExported()
			}
			if !exported || field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				continue
			}
			jsonName, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			if jsonName != "" && jsonName != "-" {
				out = append(out, name{kind: "JSON field", value: jsonName, where: at(field.Pos(), "in type "+typ)})
			}
			visit(heldType(field.Type))
		}
	}
	types := make([]string, 0, len(modules))
	for typ := range modules {
		types = append(types, typ)
	}
	sort.Strings(types)
	for _, typ := range types {
		visit(typ)
	}
	return out
}

// heldType is the named type a field holds: T, *T, []T, map[K]T, map[K]*T.
func heldType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ArrayType:
			e = t.Elt
		case *ast.MapType:
			e = t.Value
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// TestMarkdownLinksResolve fails for every relative link in docs/*.md whose
// file does not exist, or whose #anchor names no heading of a Markdown file.
func TestMarkdownLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Markdown files in docs/")
	}
	for _, problem := range brokenLinks(files) {
		t.Error(problem)
	}
}

// TestBrokenLinksAreReported proves the link check can fail.
func TestBrokenLinksAreReported(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.md", "# A\n\n## The `queen` option\n\n[ok](b.md#section-two) [ok](#the-queen-option) [gone](c.md) [bad anchor](b.md#nope) [web](https://example.com/x.md)\n\n```sh\n# not a heading\n[not a link](d.md)\n```\n")
	b := write("b.md", "# B\n\n## Section two\n")
	got := brokenLinks([]string{a, b})
	if len(got) != 2 || !strings.Contains(got[0], "c.md") || !strings.Contains(got[1], "#nope") {
		t.Fatalf("broken links reported: %q; want c.md and b.md#nope", got)
	}
}

var (
	linkPattern   = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingLine   = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	inlineLink    = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	schemePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// brokenLinks checks the links of the given Markdown files.
func brokenLinks(files []string) []string {
	var problems []string
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) (map[string]bool, error) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, err
		}
		if a, ok := anchorsOf[abs]; ok {
			return a, nil
		}
		b, err := os.ReadFile(abs)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchorsOf[abs] = a
		return a, nil
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if schemePattern.MatchString(target) {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d: link %q", filepath.Base(file), i+1, target)
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						problems = append(problems, where+": no such file")
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := anchors(dest)
				if err != nil {
					problems = append(problems, where+": "+err.Error())
					continue
				}
				if !a[anchor] {
					problems = append(problems, fmt.Sprintf("%s: no heading gives #%s", where, anchor))
				}
			}
		}
	}
	return problems
}

// proseLines returns the lines of a Markdown text with the lines of fenced
// code blocks blanked, so that line numbers stay right.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown text: the heading's text, lower-cased, without punctuation other
// than hyphens and underscores, spaces made hyphens; repeats get -1, -2, ….
func headingAnchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, line := range proseLines(text) {
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		heading := inlineLink.ReplaceAllString(m[1], "$1")
		heading = strings.ReplaceAll(heading, "`", "")
		var slug strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				slug.WriteRune(r)
			}
		}
		s := slug.String()
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}
