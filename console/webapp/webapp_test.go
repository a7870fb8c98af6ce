package webapp

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return string(b)
}

// The app is served at /console/ with index.html at its root.
func TestIndexAtTheRoot(t *testing.T) {
	index := read(t, "index.html")
	for _, want := range []string{`<script type="module" src="/console/js/main.js">`, `href="/console/app.css"`, `lang="en"`, `name="viewport"`} {
		if !strings.Contains(index, want) {
			t.Errorf("index.html lacks %s", want)
		}
	}
}

var (
	htmlRef   = regexp.MustCompile(`(?:src|href)="([^"#]+)"`)
	jsImport  = regexp.MustCompile(`(?m)^\s*import\s[^;]*?from\s+'([^']+)'|^\s*import\s+'([^']+)'|import\('([^']+)'\)`)
	cssURL    = regexp.MustCompile(`url\(\s*['"]?([^'")]+)`)
	remoteURL = regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s'"]*`)
)

// Every file the app refers to is embedded, the app refers to nothing on
// another origin, and no page carries inline script (the console's
// Content-Security-Policy forbids it).
func TestEveryReferenceIsEmbeddedAndLocal(t *testing.T) {
	files := 0
	err := fs.WalkDir(FS, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		body := read(t, name)
		var refs []string
		switch path.Ext(name) {
		case ".html":
			for _, m := range htmlRef.FindAllStringSubmatch(body, -1) {
				refs = append(refs, m[1])
			}
			if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(body) {
				t.Errorf("%s has an inline script", name)
			}
			if regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
				t.Errorf("%s has an inline event handler", name)
			}
		case ".js":
			for _, m := range jsImport.FindAllStringSubmatch(body, -1) {
				refs = append(refs, m[1]+m[2]+m[3])
			}
		case ".css":
			for _, m := range cssURL.FindAllStringSubmatch(body, -1) {
				refs = append(refs, m[1])
			}
		}
		for _, ref := range refs {
			var target string
			switch {
			case strings.HasPrefix(ref, "/console/"):
				target = strings.TrimPrefix(ref, "/console/")
			case strings.HasPrefix(ref, "./"), strings.HasPrefix(ref, "../"):
				target = path.Join(path.Dir(name), ref)
			case strings.HasPrefix(ref, "data:"):
				continue
			default:
				t.Errorf("%s refers to %q: only /console/ paths and relative module imports are allowed", name, ref)
				continue
			}
			if path.Ext(target) == "" && path.Ext(name) == ".html" {
				continue // a view of the app (/console/keys), routed on the client
			}
			if _, err := fs.Stat(FS, target); err != nil {
				t.Errorf("%s refers to %q, which is not embedded", name, ref)
			}
		}
		for _, u := range remoteURL.FindAllString(body, -1) {
			if !strings.HasPrefix(u, "http://www.w3.org/") {
				t.Errorf("%s names another origin: %s", name, u)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("only %d files embedded", files)
	}
}
