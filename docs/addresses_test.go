package docs

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Examples, help strings and tests' sample text must never point traffic
// at somebody's machine: an address a reader copies, or a test dials, is
// loopback, the unspecified address (a listener), a documentation range,
// or a name that never resolves (example.com/.net/.org, .example, .test,
// .invalid, .localhost).

// ipv4Literal matches dotted-quad IPv4 addresses that stand alone (not part
// of a version number or a longer dotted run).
var ipv4Literal = regexp.MustCompile(`(?:^|[^\w.])((?:\d{1,3}\.){3}\d{1,3})(?:$|[^\w.]|\.(?:$|\s))`)

// ipv6Candidate matches runs that may be IPv6 addresses; netip decides.
var ipv6Candidate = regexp.MustCompile(`(?:^|[^\w:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?:$|[^\w:.])`)

// urlHost matches the host of a URL (after an optional user@).
var urlHost = regexp.MustCompile(`\b(?:https?|wss?|postgres(?:ql)?)://(?:[^@/\s"'` + "`" + `<>]*@)?([A-Za-z0-9][A-Za-z0-9.-]*)`)

// documentationNets are loopback, the unspecified address and the ranges
// RFC 5737 sets aside for documentation.
var documentationNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("0.0.0.0/32"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("2001:db8::/32"),
}

// publicServices are real endpoints the product itself talks to (sign-in
// providers, the ACME CAs Caddy defaults to), XML namespaces and links for
// readers; tests name them to check those defaults.
var publicServices = map[string]bool{
	"accounts.google.com": true, "oauth2.googleapis.com": true, "www.googleapis.com": true,
	"github.com": true, "api.github.com": true,
	"acme-v02.api.letsencrypt.org": true, "acme-staging-v02.api.letsencrypt.org": true,
	"caddyserver.com": true, "www.w3.org": true, "pkg.go.dev": true,
	"keepachangelog.com": true, "semver.org": true,
}

// allowedIP reports whether an IPv4 literal is one an example may name.
func allowedIP(s string) bool {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return true // not an address (e.g. 999.1.1.1)
	}
	for _, p := range documentationNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allowedHost reports whether a URL's host is one an example may name.
// Addresses are left to the IPv4 scan; one-label names (host, x, cell) are
// placeholders that no public resolver answers.
func allowedHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if _, err := netip.ParseAddr(h); err == nil || !strings.Contains(h, ".") {
		return true
	}
	for _, suffix := range []string{".localhost", ".example", ".test", ".invalid"} {
		if strings.HasSuffix(h, suffix) {
			return true
		}
	}
	for _, domain := range []string{"example.com", "example.net", "example.org"} {
		if h == domain || strings.HasSuffix(h, "."+domain) {
			return true
		}
	}
	return publicServices[h]
}

// addressFindings lists, as "file:line: address", every address in text
// that an example may not name.
func addressFindings(file string, text []byte) []string {
	var out []string
	for i, line := range bytes.Split(text, []byte("\n")) {
		report := func(addr string) {
			out = append(out, file+":"+itoa(i+1)+": "+addr)
		}
		for _, m := range ipv4Literal.FindAllSubmatch(line, -1) {
			if !allowedIP(string(m[1])) {
				report(string(m[1]))
			}
		}
		for _, m := range ipv6Candidate.FindAllSubmatch(line, -1) {
			if a, err := netip.ParseAddr(string(m[1])); err == nil && a.Is6() && !allowedIP(string(m[1])) {
				report(string(m[1]))
			}
		}
		for _, m := range urlHost.FindAllSubmatch(line, -1) {
			if h := string(m[1]); !allowedHost(h) {
				report(h)
			}
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// repositoryFiles lists the repository's tracked text files, relative to
// its root.
func repositoryFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		switch {
		case f == "go.sum", strings.Contains(f, "/testdata/fuzz/"), strings.HasSuffix(f, "package-lock.json"), f == "docs/addresses_test.go":
			// Checksums, fuzz inputs (bytes, not addresses), the npm
			// lock's registry URLs and this file's forbidden samples.
			continue
		}
		files = append(files, f)
	}
	return files
}

// TestExamplesPointOnlyAtDocumentationAddresses scans every tracked file
// (docs, Caddyfiles, help strings, comments, tests' sample text) for IPv4
// literals and URL hosts outside loopback and the documentation ranges.
func TestExamplesPointOnlyAtDocumentationAddresses(t *testing.T) {
	files := repositoryFiles(t)
	if len(files) < 100 {
		t.Fatalf("git ls-files lists %d files: not the repository", len(files))
	}
	scanned := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		scanned++
		for _, finding := range addressFindings(f, b) {
			t.Errorf("%s: not loopback or a documentation address (use 127.0.0.1, 192.0.2.0/24 or an example.com name)", finding)
		}
	}
	if scanned < 100 {
		t.Fatalf("scanned %d text files", scanned)
	}
}

// TestForbiddenAddressesAreFound proves the scan can fail.
func TestForbiddenAddressesAreFound(t *testing.T) {
	for text, want := range map[string]int{
		"curl http://10.0.0.7:6632/health":                          1,
		"--url http://broker.internal:6632":                         1,
		"peer_listen 172.16.4.2:7946":                               1,
		"postgres://queengate@db.corp.net:5432/queen_proxy":         1,
		"http://127.0.0.1:6632 and http://192.0.2.7:6632":           0,
		"https://acme-prod.eu1.example.com/api/v1/push":             0,
		"listen 0.0.0.0:7946, cells at 198.51.100.4 or 203.0.113.9": 0,
		"go 1.26.8 and caddy v2.11.9.1":                             0,
		"http://dev.localhost:8080/console/":                        0,
		"a sentence ending in 10.1.2.3.":                            1,
		"peer_listen [fd12:3456::7]:7946":                           1,
		"AAAA 2001:db8::10, or [::1]:8080, at 15:04:05":             0,
	} {
		if got := len(addressFindings("docs/x.md", []byte(text))); got != want {
			t.Errorf("%q: %d findings, want %d", text, got, want)
		}
	}
}
