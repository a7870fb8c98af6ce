package realbroker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirSaysWhyABrokerIsNotUsable(t *testing.T) {
	root := t.TempDir()
	missing := filepath.Join(root, "nothing-here")
	empty := filepath.Join(root, "empty")
	notExec := filepath.Join(root, "not-executable")
	noSchema := filepath.Join(root, "no-schema")
	whole := filepath.Join(root, "whole")
	for _, d := range []string{empty, notExec, noSchema, whole} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeBinary(t, notExec, 0o644)
	writeBinary(t, noSchema, 0o755)
	writeBinary(t, whole, 0o755)
	for _, d := range []string{notExec, whole} {
		if err := os.MkdirAll(filepath.Join(d, "lib", "schema"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		dir  string
		want string // "" = usable
	}{
		{missing, "no such directory"},
		{empty, "no server/bin/queen-server in it"},
		{notExec, "server/bin/queen-server is not executable"},
		{noSchema, "no lib/schema in it"},
		{whole, ""},
	} {
		t.Setenv(EnvDir, tc.dir)
		got, err := Dir()
		if tc.want == "" {
			if err != nil || got != tc.dir {
				t.Errorf("%s: Dir() = %q, %v; want it, no error", tc.dir, got, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: Dir() = %q, want an error saying %q", tc.dir, got, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.dir) || !strings.Contains(err.Error(), EnvDir) {
			t.Errorf("%s: error %q should name the folder, %s and %q", tc.dir, err, EnvDir, tc.want)
		}
	}
}

func TestDirDefaultsToSharedBrokerBesideTheRepository(t *testing.T) {
	t.Setenv(EnvDir, "")
	dir, _, err := candidateDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("test assumes the repository root is %s: %v", root, err)
	}
	if want := filepath.Join(filepath.Dir(root), "shared", "broker"); dir != want {
		t.Fatalf("default broker folder = %q, want %q", dir, want)
	}
}

func TestPostgresEnvFromURL(t *testing.T) {
	got, err := postgresEnv("postgres://alice:s%3Acret@127.0.0.1:5499/qg_x_1?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	want := "PG_HOST=127.0.0.1 PG_PORT=5499 PG_DB=qg_x_1 PG_USER=alice PG_PASSWORD=s:cret"
	if strings.Join(got, " ") != want {
		t.Fatalf("postgresEnv = %q, want %q", got, want)
	}
	if _, err := postgresEnv("postgres://127.0.0.1:5432/"); err == nil {
		t.Fatal("a URL without a database should be refused")
	}
}

func writeBinary(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	bin := filepath.Join(dir, serverBinary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
}
