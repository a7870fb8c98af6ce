// Package realbroker starts the real public Queen broker (0.15.1, from the
// project's shared folder) for tests, each against a database of its own on
// the test PostgreSQL (internal/pgtest).
//
// Use it from test files built with the realbroker tag, in a package whose
// TestMain calls pgtest.Main:
//
//	//go:build realbroker
//
//	b := realbroker.Start(t)
//	resp, err := http.Get(b.URL + "/health")
//
// The broker is found by Dir. A missing broker fails the test; it never
// skips (a fresh clone runs without the tag, and so without these tests).
//
// This package is for tests only.
package realbroker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvDir names the broker's folder explicitly (the one holding
// server/bin/queen-server and lib/schema).
const EnvDir = "QUEENGATE_TEST_BROKER_DIR"

// serverBinary is the broker's executable, relative to Dir.
const serverBinary = "server/bin/queen-server"

// Dir returns the broker's folder: $QUEENGATE_TEST_BROKER_DIR, or else
// ../shared/broker beside the repository root (the first folder above the
// working directory that holds a go.mod). Its error says exactly why no
// usable broker is there.
func Dir() (string, error) {
	dir, origin, err := candidateDir()
	if err != nil {
		return "", err
	}
	if err := checkDir(dir); err != nil {
		return "", fmt.Errorf("%s (%s): %w", dir, origin, err)
	}
	return dir, nil
}

func candidateDir() (dir, origin string, err error) {
	if d := os.Getenv(EnvDir); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", "", fmt.Errorf("%s=%q: %w", EnvDir, d, err)
		}
		return abs, "from " + EnvDir, nil
	}
	root, err := repositoryRoot()
	if err != nil {
		return "", "", err
	}
	return filepath.Join(filepath.Dir(root), "shared", "broker"),
		"../shared/broker beside the repository; set " + EnvDir + " to use another", nil
}

func repositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory, so no ../shared/broker beside the repository; set " + EnvDir)
		}
		dir = parent
	}
}

func checkDir(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errors.New("no such directory")
		}
		return err
	}
	if !info.IsDir() {
		return errors.New("not a directory")
	}
	bin := filepath.Join(dir, serverBinary)
	info, err = os.Stat(bin)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no %s in it", serverBinary)
		}
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", serverBinary)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", serverBinary)
	}
	if _, err := os.Stat(filepath.Join(dir, "lib", "schema")); err != nil {
		return fmt.Errorf("no lib/schema in it (the broker applies its schema from there): %w", err)
	}
	return nil
}
