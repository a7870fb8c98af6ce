package provision

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docExample is one request of docs/provisioning.md and the answer the
// page shows for it.
type docExample struct {
	line   int
	method string
	path   string
	header []string
	body   string
	status int
	answer string
}

// readDocExamples reads the ```http blocks of the page: a request block
// ("METHOD PATH", header lines, a blank line, a body) followed by its
// answer block ("HTTP/1.1 <status> …", a blank line, a JSON body).
func readDocExamples(t *testing.T) []docExample {
	t.Helper()
	f, err := os.Open("../docs/provisioning.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks [][]string
	var starts []int
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && line == "```http":
			in, cur = true, nil
			starts = append(starts, n)
		case in && line == "```":
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, line)
		}
	}
	var out []docExample
	for i := 0; i < len(blocks); i++ {
		b := blocks[i]
		method, path, ok := strings.Cut(b[0], " ")
		if !ok || strings.HasPrefix(b[0], "HTTP/") {
			t.Fatalf("provisioning.md:%d: an answer without its request", starts[i])
		}
		ex := docExample{line: starts[i], method: method, path: path}
		j := 1
		for ; j < len(b) && b[j] != ""; j++ {
			name, value, _ := strings.Cut(b[j], ": ")
			ex.header = append(ex.header, name, value)
		}
		ex.body = strings.TrimSpace(strings.Join(b[min(j, len(b)):], "\n"))
		if i+1 >= len(blocks) || !strings.HasPrefix(blocks[i+1][0], "HTTP/1.1 ") {
			t.Fatalf("provisioning.md:%d: a request without its answer", starts[i])
		}
		i++
		fields := strings.Fields(blocks[i][0])
		if ex.status, err = strconv.Atoi(fields[1]); err != nil {
			t.Fatalf("provisioning.md:%d: %v", starts[i], err)
		}
		ex.answer = strings.TrimSpace(strings.Join(blocks[i][1:], "\n"))
		out = append(out, ex)
	}
	return out
}

var capture = regexp.MustCompile(`^\{([a-z_]+)\}$`)

// Every example of docs/provisioning.md runs, in order, and answers what
// the page shows; every route of the API has an example.
func TestProvisioningDocExamples(t *testing.T) {
	e := newEnv(t)
	examples := readDocExamples(t)
	vars := map[string]string{}
	expand := func(s string) string {
		for name, v := range vars {
			s = strings.ReplaceAll(s, "{"+name+"}", v)
		}
		return s
	}
	covered := map[string]bool{}
	for _, ex := range examples {
		token := ""
		var header []string
		for i := 0; i+1 < len(ex.header); i += 2 {
			if ex.header[i] == "Authorization" {
				if ex.header[i+1] != "Bearer $TOKEN" {
					t.Fatalf("provisioning.md:%d: Authorization is not \"Bearer $TOKEN\"", ex.line)
				}
				token = e.token
				continue
			}
			header = append(header, ex.header[i], ex.header[i+1])
		}
		path := strings.TrimPrefix(expand(ex.path), Prefix)
		var body any
		if ex.body != "" {
			body = ex.body
		}
		r := e.call(token, ex.method, path, body, header...)
		if r.status != ex.status {
			t.Fatalf("provisioning.md:%d: %s %s answered %d %s, the page shows %d", ex.line, ex.method, ex.path, r.status, r.raw, ex.status)
		}
		if rt, _, err := e.api.match(mustRequest(t, ex.method, Prefix+path)); err == nil {
			covered[rt.method+" "+rt.pattern] = true
		}
		if ex.answer == "" {
			continue
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(ex.answer), &want); err != nil {
			t.Fatalf("provisioning.md:%d: the answer shown is not JSON: %v", ex.line, err)
		}
		for k, w := range want {
			got, has := r.body[k]
			if !has {
				t.Fatalf("provisioning.md:%d: the answer %s lacks %q", ex.line, r.raw, k)
			}
			if s, isString := w.(string); isString {
				if s == "…" {
					continue
				}
				// "text …" stands for an answer that starts with text.
				if prefix, cut := strings.CutSuffix(s, " …"); cut {
					if g, _ := got.(string); !strings.HasPrefix(g, prefix) {
						t.Fatalf("provisioning.md:%d: %s is %q, the page shows it starting %q", ex.line, k, g, prefix)
					}
					continue
				}
				if m := capture.FindStringSubmatch(s); m != nil {
					if prev, seen := vars[m[1]]; seen && prev != got {
						t.Fatalf("provisioning.md:%d: %s is %v, earlier %v", ex.line, k, got, prev)
					}
					vars[m[1]], _ = got.(string)
					continue
				}
			}
			wj, _ := json.Marshal(w)
			gj, _ := json.Marshal(got)
			if string(wj) != string(gj) {
				t.Fatalf("provisioning.md:%d: %s is %s, the page shows %s", ex.line, k, gj, wj)
			}
		}
	}
	for _, rt := range e.api.routes {
		if !covered[rt.method+" "+rt.pattern] {
			t.Errorf("docs/provisioning.md has no example of %s %s%s", rt.method, Prefix, rt.pattern)
		}
	}
}

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
