// Command queengate-dev builds and starts a working gateway on a fresh
// machine with one command:
//
//	go run ./cmd/queengate-dev
//
// This package is only the launcher, and imports nothing but the standard
// library so that `go run` compiles it in seconds and it can say at once
// that the first build of the gateway takes minutes. It then builds the
// gateway (./cmd/queengate-dev/gateway, which compiles Caddy) with
// `go build -v`, whose package names on stderr are the progress, into the
// user's cache directory, and replaces itself with it: arguments,
// environment, standard streams and signals all go to the gateway.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// gatewayPackage is the program the launcher builds and runs.
const gatewayPackage = "github.com/queengate/queengate/cmd/queengate-dev/gateway"

func main() {
	fmt.Println("queengate-dev: building the gateway. The first build compiles Caddy and takes minutes")
	fmt.Println("(about 6 minutes of CPU time: several minutes on a two-core machine); later runs take seconds.")
	fmt.Println("go build lists the packages it compiles below, as it goes.")
	bin, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "queengate-dev:", err)
		os.Exit(1)
	}
	args := append([]string{bin}, os.Args[1:]...)
	if err := syscall.Exec(bin, args, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "queengate-dev: run %s: %v\n", bin, err)
		os.Exit(1)
	}
}

// build compiles the gateway into the user's cache directory; go build
// relinks only when something changed.
func build() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "queengate-dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make %s: %w", dir, err)
	}
	bin := filepath.Join(dir, "queengate-dev-gateway")
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the go command is not on PATH: %w", err)
	}
	cmd := exec.Command(goTool, "build", "-v", "-o", bin, gatewayPackage)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("go build %s failed (run it from the repository): %w", gatewayPackage, err)
		}
		return "", fmt.Errorf("go build: %w", err)
	}
	return bin, nil
}
