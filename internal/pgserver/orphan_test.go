package pgserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const orphanEnv = "PGSERVER_TEST_ORPHAN_CHILD"

// TestParentDeathStopsServer runs this test binary as a child that starts a
// server and then dies without Close; the postmaster must go away with it.
func TestParentDeathStopsServer(t *testing.T) {
	if os.Getenv(orphanEnv) == "1" {
		s, err := Start(context.Background(), Options{})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(3)
		}
		s.mu.Lock()
		fmt.Printf("PID %d DIR %s\n", s.proc.pid, s.Dir())
		s.mu.Unlock()
		os.Exit(0) // no Close: simulate a crashed test binary
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestParentDeathStopsServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var pid int
	var dir string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "PID" {
			pid, _ = strconv.Atoi(f[1])
			dir = f[3]
		}
	}
	if pid == 0 {
		t.Fatalf("child printed no pid:\n%s", out)
	}
	defer os.RemoveAll(dir)
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) || isZombie(pid) {
			return
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("postmaster %d survived its parent (kill 0: %v)", pid, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isZombie reports whether pid has exited but not been reaped (orphans are
// reaped by PID 1, which in some containers never does it).
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
