package console

import (
	"bytes"
	"embed"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/queengate/queengate/tenancy"
)

// appCSP is the policy of the console app's pages: everything from this
// origin, nothing from anywhere else, no inline script.
const appCSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

//go:embed placeholder
var placeholderFiles embed.FS

// placeholderApp is served when no web app is given.
var placeholderApp = func() fs.FS {
	sub, err := fs.Sub(placeholderFiles, "placeholder")
	if err != nil {
		panic(err)
	}
	return sub
}()

// appTypes are the content types of the app's usual files, fixed here
// rather than left to the machine's MIME table (module scripts must be
// served as JavaScript).
var appTypes = map[string]string{
	".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
	".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml", ".json": "application/json", ".png": "image/png",
	".ico": "image/x-icon", ".woff2": "font/woff2", ".txt": "text/plain; charset=utf-8",
}

// serveApp serves the console web app to a live session, falling back to
// index.html for paths that are not files (client-side routes).
func (s *Surface) serveApp(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, errMethod)
		return
	}
	if !s.liveDocumentSession(r) {
		target := r.URL.Path
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, loginURL(target), http.StatusFound)
		return
	}
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/console"), "/")
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" || !fs.ValidPath(name) {
		name = "index.html"
	}
	data, served, err := s.readAppFile(name)
	if err != nil {
		writeError(w, errNotFoundRoute)
		return
	}
	h := w.Header()
	ctype := appTypes[path.Ext(served)]
	if ctype == "" {
		ctype = mime.TypeByExtension(path.Ext(served))
	}
	if ctype == "" {
		ctype = http.DetectContentType(data)
	}
	h.Set("Content-Type", ctype)
	if strings.HasPrefix(served, "assets/") {
		h.Set("Cache-Control", "private, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "private, no-cache")
	}
	if strings.HasPrefix(ctype, "text/html") {
		h.Set("Content-Security-Policy", appCSP)
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	http.ServeContent(w, r, served, time.Time{}, bytes.NewReader(data))
}

// readAppFile reads a file of the app, or index.html when name is not a
// file (a directory or a client-side route). A missing file with an
// extension (a script, a style sheet) is not found rather than answered
// with the page, so a stale page asking for an old file sees a 404.
func (s *Surface) readAppFile(name string) ([]byte, string, error) {
	if st, err := fs.Stat(s.app, name); err == nil && !st.IsDir() {
		b, err := readAll(s.app, name)
		return b, name, err
	}
	if ext := path.Ext(name); ext != "" && ext != ".html" {
		return nil, "", fs.ErrNotExist
	}
	b, err := readAll(s.app, "index.html")
	return b, "index.html", err
}

func readAll(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 32<<20))
}

// liveDocumentSession reports whether a document request carries a live
// human session: the cookie counts on navigations here, an API key never.
func (s *Surface) liveDocumentSession(r *http.Request) bool {
	if s.o.Sessions == nil {
		return false
	}
	cred, err := tenancy.ExtractDocumentCredential(r.Header, s.o.Cookies, s.o.IsHTTPS(r))
	if err != nil || cred.Kind != tenancy.CredentialSession {
		return false
	}
	_, e := s.verifySession(r.Context(), cred.Value)
	return e == nil
}
