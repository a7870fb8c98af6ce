package tenancy

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// FuzzClassifyRoute checks ClassifyRoute's safety properties on arbitrary
// methods and paths. The seed corpus lives in testdata/fuzz/FuzzClassifyRoute.
func FuzzClassifyRoute(f *testing.F) {
	f.Fuzz(func(t *testing.T, method, path string) {
		r, err := ClassifyRoute(method, path)
		if r2, err2 := ClassifyRoute(method, path); r2 != r || err2 != err {
			t.Fatalf("not deterministic: %v, %v then %v, %v", r, err, r2, err2)
		}
		if err != nil {
			if !errors.Is(err, ErrAmbiguousPath) {
				t.Fatalf("error %v does not wrap ErrAmbiguousPath", err)
			}
			if r != routeBlocked {
				t.Fatalf("error %v came with route %v", err, r)
			}
			return
		}
		checkAccepted(t, method, path, r)
	})
}

// checkAccepted asserts what must hold of every path ClassifyRoute accepts,
// using the standard library's decoder as an independent reading.
func checkAccepted(t *testing.T, method, path string, r Route) {
	t.Helper()
	if !strings.HasPrefix(path, "/") {
		t.Fatalf("accepted %q, which does not start with /", path)
	}
	if strings.Contains(path, "//") {
		t.Fatalf("accepted %q, which has an empty segment", path)
	}
	for _, seg := range strings.Split(path, "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil {
			t.Fatalf("accepted %q, whose segment %q does not decode: %v", path, seg, err)
		}
		if seg == "." || seg == ".." || dec == "." || dec == ".." {
			t.Fatalf("accepted %q, which has the dot segment %q", path, seg)
		}
	}
	decoded, err := url.PathUnescape(path)
	if err != nil {
		t.Fatalf("accepted %q, which does not decode: %v", path, err)
	}
	if strings.ContainsAny(decoded, "\\\x7f") || strings.IndexFunc(decoded, func(c rune) bool { return c < 0x20 }) >= 0 {
		t.Fatalf("accepted %q, which holds a backslash or control byte", path)
	}
	if strings.Count(decoded, "/") != strings.Count(path, "/") {
		t.Fatalf("accepted %q, which holds an encoded slash", path)
	}
	if raw := classifyPath(method, path); raw != r {
		t.Fatalf("returned %v for %q, the raw path classifies as %v", r, path, raw)
	}
	if strings.Contains(path, "%") {
		if dec := classifyPath(method, decoded); dec != r {
			t.Fatalf("returned %v for %q, but the decoded %q classifies as %v", r, path, decoded, dec)
		}
	}
	if strings.ContainsAny(method, "abcdefghijklmnopqrstuvwxyz") {
		t.Fatalf("accepted the method %q, which has lower-case letters", method)
	}
	if lower := classifyPath(method, strings.ToLower(decoded)); strings.ToLower(decoded) == lowerASCII(decoded) && lower != r {
		t.Fatalf("returned %v for %q, but in lower case it classifies as %v", r, path, lower)
	}
	if IsDLQReplay(method, path) && r != routeQueueAdmin {
		t.Fatalf("IsDLQReplay(%s %q) is true for a %v route", method, path, r)
	}
	if r.Class != ClassGated && (r.Feature != FeatureNone || r.Op != GatedNone) {
		t.Fatalf("non-gated route %+v carries a feature or op", r)
	}
	if r.Class == ClassGated && (r.Feature == FeatureNone || r.Op == GatedNone) {
		t.Fatalf("gated route %+v lacks a feature or op", r)
	}
}
