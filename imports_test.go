package queengate

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// TestImportRegistersEverything: importing the module root, as xcaddy's
// generated main does, registers every queengate module and the `caddy
// queen` command with its subcommands.
func TestImportRegistersEverything(t *testing.T) {
	for _, id := range []string{
		"queen",
		"http.handlers.queen_gateway",
		"http.reverse_proxy.upstreams.queen",
		"tls.permission.queen",
		"http.handlers.queen_provision",
	} {
		if _, err := caddy.GetModule(id); err != nil {
			t.Errorf("module %s is not registered: %v", id, err)
		}
	}
	queen, ok := caddycmd.Commands()["queen"]
	if !ok {
		t.Fatal("the `caddy queen` command is not registered")
	}
	if queen.CobraFunc == nil {
		t.Fatal("`caddy queen` has no subcommands")
	}
}

// TestEveryRegisteringPackageIsImported: each package of this module that
// registers something with Caddy (a module, a command, a Caddyfile
// directive or global option) is imported by imports.go, so that a new one
// cannot be left out of what xcaddy builds. Test files, main packages and
// internal/ are not registration points.
func TestEveryRegisteringPackageIsImported(t *testing.T) {
	fset := token.NewFileSet()
	root, err := parser.ParseFile(fset, "imports.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]bool{}
	for _, imp := range root.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		imported[path] = true
	}
	const module = "github.com/queengate/queengate"
	registers := regexp.MustCompile(`\b(caddy\.RegisterModule|caddycmd\.RegisterCommand|httpcaddyfile\.Register\w+)\(`)
	found := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !registers.Match(src) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, src, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if f.Name.Name == "main" || dir == "internal" || strings.HasPrefix(dir, "internal/") {
			return nil
		}
		found++
		if !imported[module+"/"+dir] {
			t.Errorf("%s registers with Caddy, but imports.go does not import %s/%s", path, module, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 2 {
		t.Fatalf("found %d registering files; expected at least caddymodule's and queencli's: the scan reads nothing", found)
	}
}
