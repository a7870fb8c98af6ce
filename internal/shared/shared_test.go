package shared

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	t.Setenv(EnvDir, "/somewhere")
	if d, err := Dir(); err != nil || d != "/somewhere" {
		t.Fatalf("with %s set: %q, %v", EnvDir, d, err)
	}
	t.Setenv(EnvDir, "")
	d, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("../..")
	if filepath.Clean(d) != filepath.Join(filepath.Dir(root), "shared") {
		t.Fatalf("Dir() = %q, want the sibling of %q", d, root)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
}
