package docs

import (
	"os"
	"strings"
	"testing"

	"github.com/queengate/queengate/console"
)

// connectExampleURL is the example cluster's address in connect.md.
const connectExampleURL = "https://acme-prod.eu1.example.com"

// TestConnectSnippetsAreThePages: connect.md shows, for its example
// cluster, exactly the snippets the console's Connect page gives, one
// fenced block each; the e2e dev-command test runs the page's JavaScript
// requests and curl lines against a gateway.
func TestConnectSnippetsAreThePages(t *testing.T) {
	b, err := os.ReadFile("connect.md")
	if err != nil {
		t.Fatal(err)
	}
	if p := connectSnippetProblems(string(b), connectExampleURL); len(p) > 0 {
		t.Fatal(strings.Join(p, "\n"))
	}
}

// TestConnectSnippetCheckCanFail proves a changed snippet is reported.
func TestConnectSnippetCheckCanFail(t *testing.T) {
	b, err := os.ReadFile("connect.md")
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(b), "bearerToken: process.env", "token: process.env", 1)
	if p := connectSnippetProblems(changed, connectExampleURL); len(p) != 1 || !strings.Contains(p[0], "js") {
		t.Fatalf("a changed JavaScript snippet gives %v", p)
	}
}

func connectSnippetProblems(page, url string) []string {
	var out []string
	for _, s := range console.ConnectSnippets(url) {
		if !strings.Contains(page, "```"+s.Lang+"\n"+s.Code+"```\n") {
			out = append(out, "connect.md lacks the Connect page's "+s.Lang+" snippet:\n"+s.Code)
		}
	}
	return out
}
