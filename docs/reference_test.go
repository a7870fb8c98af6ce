package docs

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	_ "github.com/queengate/queengate/queencli" // registers `caddy queen`
)

// sourceFuncs parses dir's non-test Go files and returns its functions by
// "Receiver.Name" (or "Name" for plain functions).
func sourceFuncs(t *testing.T, dir string) map[string]*ast.FuncDecl {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			key := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				key = receiverType(fn.Recv.List[0].Type) + "." + key
			}
			funcs[key] = fn
		}
	}
	if len(funcs) == 0 {
		t.Fatalf("no functions in %s", dir)
	}
	return funcs
}

// parserOptions are the option names the named parsers' switches accept.
func parserOptions(t *testing.T, funcs map[string]*ast.FuncDecl, parsers ...string) []string {
	t.Helper()
	var out []string
	for _, p := range parsers {
		fn := funcs[p]
		if fn == nil {
			t.Fatalf("no parser %s in %s: the test no longer knows where the options are", p, sourceDir)
		}
		for _, n := range caseLabels(fn, func(token.Pos, string) string { return "" }) {
			out = append(out, n.value)
		}
	}
	return out
}

// paragraph returns the paragraph of text that starts with start.
func paragraph(t *testing.T, text, start string) string {
	t.Helper()
	i := strings.Index(text, start)
	if i < 0 {
		t.Fatalf("no paragraph starting %q", start)
	}
	rest := text[i:]
	if end := strings.Index(rest, "\n\n"); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// codeWords are the first words of the paragraph's code spans that look
// like option names (lower case, digits, underscores).
func codeWords(p string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9_]*)[ `]").FindAllStringSubmatch(p, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestREADMEListsEveryOption: README's short lists of the `queen` and
// `queen_gateway` options name every option of those two parsers, and
// nothing that is no option.
func TestREADMEListsEveryOption(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	funcs := sourceFuncs(t, sourceDir)
	all := map[string]bool{}
	names, err := configurationNames(sourceDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		all[n.value] = true
	}
	for _, c := range []struct {
		start   string
		parsers []string
		canary  string
	}{
		{"Options of `queen`:", []string{"App.UnmarshalCaddyfile"}, "isolation_probe_interval"},
		{"Options of `queen_gateway`:", []string{"Gateway.unmarshal", "Gateway.unmarshalEnforcement"}, "probes"},
	} {
		p := paragraph(t, string(readme), c.start)
		options := parserOptions(t, funcs, c.parsers...)
		if !slices.Contains(options, c.canary) {
			t.Errorf("%v no longer accepts %q: update this test", c.parsers, c.canary)
		}
		for _, o := range options {
			if !strings.Contains(p, "`"+o+"`") && !strings.Contains(p, "`"+o+" ") {
				t.Errorf("README's %q does not name option `%s` (%v accepts it)", c.start, o, c.parsers)
			}
		}
		for _, w := range codeWords(p) {
			if !all[w] {
				t.Errorf("README's %q names `%s`, which no Caddyfile parser accepts", c.start, w)
			}
		}
	}
}

// queenCommand builds the `caddy queen` command tree as Caddy does.
func queenCommand(t *testing.T) *cobra.Command {
	t.Helper()
	reg, ok := caddycmd.Commands()["queen"]
	if !ok || reg.CobraFunc == nil {
		t.Fatal("the queen command is not registered")
	}
	root := &cobra.Command{Use: "queen"}
	reg.CobraFunc(root)
	if len(root.Commands()) < 5 {
		t.Fatalf("the queen command has %d subcommands", len(root.Commands()))
	}
	return root
}

// leafCommands are the runnable commands of the tree as their paths after
// "queen" ("cell add", "migrate").
func leafCommands(root *cobra.Command) []string {
	var out []string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		subs := c.Commands()
		if len(subs) == 0 {
			out = append(out, strings.Join(path, " "))
		}
		for _, s := range subs {
			if s.Name() == "help" || s.Name() == "completion" {
				continue
			}
			walk(s, append(slices.Clone(path), s.Name()))
		}
	}
	walk(root, nil)
	sort.Strings(out)
	return out
}

// resolve walks words down the tree: the deepest command they name, and the
// words left.
func resolve(root *cobra.Command, words []string) (*cobra.Command, []string) {
	c := root
	for len(words) > 0 {
		var next *cobra.Command
		for _, s := range c.Commands() {
			if s.Name() == words[0] || slices.Contains(s.Aliases, words[0]) {
				next = s
			}
		}
		if next == nil {
			break
		}
		c, words = next, words[1:]
	}
	return c, words
}

// flagNames are the --flags a documented command line uses.
var flagNames = regexp.MustCompile(`(?:^|[\s\[|(])--([a-z][a-z0-9-]*)`)

// checkCommandLine reports what a documented `caddy queen …` line names
// that the tree lacks: the command, or one of its flags.
func checkCommandLine(root *cobra.Command, line string) []string {
	words := strings.Fields(line)
	c, rest := resolve(root, words)
	var problems []string
	if c.HasSubCommands() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && !strings.HasPrefix(rest[0], "<") {
		problems = append(problems, "no command `queen "+strings.Join(words[:len(words)-len(rest)+1], " ")+"`")
	}
	for _, m := range flagNames.FindAllStringSubmatch(line, -1) {
		f := m[1]
		if c.Flags().Lookup(f) == nil && c.InheritedFlags().Lookup(f) == nil && c.PersistentFlags().Lookup(f) == nil && f != "help" {
			problems = append(problems, "`"+c.CommandPath()+"` has no flag --"+f)
		}
	}
	return problems
}

// documentedCommandLines returns what follows each `caddy queen ` in a line
// of prose, a code span or a code block, up to the end of the span, the
// line or the next `caddy queen`.
func documentedCommandLines(line string) []string {
	parts := strings.Split(line, "caddy queen ")
	var out []string
	for _, p := range parts[1:] {
		if i := strings.IndexByte(p, '`'); i >= 0 {
			p = p[:i]
		}
		out = append(out, p)
	}
	return out
}

// TestDocumentedCommandsExist: every `caddy queen …` line in README.md and
// docs/*.md names a command and flags the CLI has, every row of the
// command table in docs/operations.md does too, and that table has a row
// for every command the CLI has.
func TestDocumentedCommandsExist(t *testing.T) {
	root := queenCommand(t)
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	lines := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(b), "\n") {
			for _, found := range documentedCommandLines(l) {
				line := strings.TrimSpace(found)
				// Stop at shell punctuation: what follows is another command.
				if j := strings.IndexAny(line, "|;&)#"); j >= 0 && !strings.HasPrefix(line[j:], "|") {
					line = line[:j]
				}
				if strings.HasPrefix(line, "…") || strings.HasPrefix(line, "<") || line == "" || strings.HasPrefix(line, "...") {
					continue // "caddy queen …": the command tree as a whole
				}
				lines++
				for _, p := range checkCommandLine(root, line) {
					t.Errorf("%s:%d: %s (in %q)", f, i+1, p, "caddy queen "+line)
				}
			}
		}
	}
	if lines < 20 {
		t.Fatalf("found %d documented command lines: the scan is broken", lines)
	}

	ops, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for i, l := range strings.Split(string(ops), "\n") {
		m := regexp.MustCompile("^\\| `([a-z][^`]*)` \\|").FindStringSubmatch(l)
		if m == nil || strings.HasPrefix(m[1], "--") {
			continue
		}
		line := strings.ReplaceAll(m[1], `\|`, "|")
		c, _ := resolve(root, strings.Fields(line))
		if c == root {
			continue // another table (flags, exit codes)
		}
		rows[strings.TrimPrefix(c.CommandPath(), "queen ")] = true
		for _, p := range checkCommandLine(root, line) {
			t.Errorf("operations.md:%d: %s", i+1, p)
		}
	}
	for _, cmd := range leafCommands(root) {
		if !rows[cmd] {
			t.Errorf("docs/operations.md's command table has no row for `%s`", cmd)
		}
	}
}

// TestCommandCheckCanFail proves the command checks report what they
// should.
func TestCommandCheckCanFail(t *testing.T) {
	root := queenCommand(t)
	for line, want := range map[string]int{
		"cell add eu1-a --region eu1 --url http://127.0.0.1:6632": 0,
		"cell frobnicate eu1-a":                                   1,
		"cell add eu1-a --colour blue":                            1,
		"usage --cluster acme-prod --format csv":                  0,
		"key create --cluster c --database-url x":                 0,
	} {
		if got := len(checkCommandLine(root, line)); got != want {
			t.Errorf("%q: %d problems, want %d: %v", line, got, want, checkCommandLine(root, line))
		}
	}
	if got := documentedCommandLines("`caddy queen cluster list --cell eu1-a`, then caddy queen cluster move <c> --to <cell>"); len(got) != 2 ||
		got[0] != "cluster list --cell eu1-a" || got[1] != "cluster move <c> --to <cell>" {
		t.Errorf("two commands on one line read as %q", got)
	}
	if !slices.Contains(leafCommands(root), "cell add") || slices.Contains(leafCommands(root), "cell") {
		t.Errorf("leaf commands: %v", leafCommands(root))
	}
}

// readinessFields are the names the readiness checks report under: the
// first result of every `return "<name>", …` in caddymodule's functions
// that return (string, string, bool), the ReadinessCheck shape, and every
// `detail["<name>"] = …` the readiness code writes itself.
func readinessFields(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{"status": true}
	for _, fn := range sourceFuncs(t, sourceDir) {
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok {
				return true
			}
			for _, l := range as.Lhs {
				ix, ok := l.(*ast.IndexExpr)
				if !ok {
					continue
				}
				m, ok := ix.X.(*ast.Ident)
				lit, isLit := ix.Index.(*ast.BasicLit)
				if ok && m.Name == "detail" && isLit && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						seen[v] = true
					}
				}
			}
			return true
		})
		res := fn.Type.Results
		if res == nil || res.NumFields() != 3 {
			continue
		}
		var types []string
		for _, f := range res.List {
			id, ok := f.Type.(*ast.Ident)
			if !ok {
				break
			}
			for range max(1, len(f.Names)) {
				types = append(types, id.Name)
			}
		}
		if strings.Join(types, ",") != "string,string,bool" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncLit); ok {
				return false
			}
			ret, ok := n.(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 3 {
				return true
			}
			if lit, ok := ret.Results[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && v != "" {
					seen[v] = true
				}
			}
			return true
		})
	}
	var out []string
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// TestReadinessFieldsMatchTheCode: the example /readyz body in
// deployment.md has exactly the fields the readiness checks report, and
// troubleshooting.md's table of readiness answers names only those.
func TestReadinessFieldsMatchTheCode(t *testing.T) {
	fields := readinessFields(t)
	for _, canary := range []string{"database", "invalidation", "role", "cell_isolation", "storage_quota"} {
		if !slices.Contains(fields, canary) {
			t.Fatalf("the readiness extraction did not find %q (found %v): update this test", canary, fields)
		}
	}
	dep, err := os.ReadFile("deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)A ready answer with detail.*?```json\n(\\{.*?\\})\n```").FindSubmatch(dep)
	if m == nil {
		t.Fatal("deployment.md has no example /readyz body after \"A ready answer with detail\"")
	}
	var body map[string]string
	if err := json.Unmarshal(m[1], &body); err != nil {
		t.Fatalf("deployment.md's example /readyz body: %v", err)
	}
	var documented []string
	for k := range body {
		documented = append(documented, k)
	}
	sort.Strings(documented)
	if !slices.Equal(documented, fields) {
		t.Errorf("deployment.md's example /readyz body has fields %v; the gateway reports %v", documented, fields)
	}
	for _, f := range fields {
		if !strings.Contains(string(dep), "- `"+f+"`:") {
			t.Errorf("deployment.md does not describe the /readyz field `%s` (as a list item \"- `%s`: …\")", f, f)
		}
	}
	ts, err := os.ReadFile("troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	table := paragraph(t, string(ts), "| field | value | meaning |")
	for _, r := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		if !slices.Contains(fields, r[1]) {
			t.Errorf("troubleshooting.md's readiness table names `%s`, which /readyz does not report", r[1])
		}
	}
}
