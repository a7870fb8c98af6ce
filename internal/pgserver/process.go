package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// runAs describes the OS identity the PostgreSQL binaries run under. A nil
// credential means "the current user".
type runAs struct {
	name string
	cred *syscall.Credential
}

// chooseUser returns the identity to run PostgreSQL as: the current user, or
// osUser when the current process is root (PostgreSQL refuses to run as root).
func chooseUser(osUser string) (runAs, error) {
	if os.Geteuid() != 0 {
		name := strconv.Itoa(os.Geteuid())
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
		return runAs{name: name}, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return runAs{}, fmt.Errorf("pgserver: running as root, and PostgreSQL refuses to run as root, but the OS user %q to run it as does not exist (%v): "+
			"create it with `useradd --system --user-group %s` (installing the postgresql package also creates it) or run as a non-root user; %s",
			osUser, err, osUser, InstallHint)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return runAs{}, fmt.Errorf("pgserver: OS user %q has a non-numeric uid/gid %q/%q", osUser, u.Uid, u.Gid)
	}
	return runAs{name: osUser, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}, nil
}

// chown hands path to the run-as user (a no-op when running as ourselves).
func (r runAs) chown(path string) error {
	if r.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: chown %s to %s: %w", path, r.name, err)
	}
	return nil
}

// command builds a command that runs as r, with a minimal environment; it is
// killed if ctx ends before it exits.
func (r runAs) command(ctx context.Context, dir, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "LANG=C", "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred, Setpgid: true}
	return cmd
}

// process is a running postmaster.
type process struct {
	pid     int
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // valid after done is closed
}

// spawn starts cmd so that it receives SIGQUIT (immediate shutdown) when the
// thread that started it dies. The starting goroutine keeps its OS thread
// locked until the child exits, so the parent-death signal fires only when
// the whole process goes away, never because the Go runtime retired a thread.
func spawn(cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalAndWait sends each signal in turn, giving the process grace after each
// to exit; it returns once the process has exited, or an error when even the
// last signal did not end it.
func (p *process) signalAndWait(steps []shutdownStep) error {
	for _, s := range steps {
		if p.exited() {
			return nil
		}
		if err := syscall.Kill(p.pid, s.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgserver: signal %v to postgres pid %d: %w", s.sig, p.pid, err)
		}
		select {
		case <-p.done:
			return nil
		case <-time.After(s.grace):
		}
	}
	return fmt.Errorf("pgserver: postgres pid %d did not exit", p.pid)
}

// shutdownStep is one escalation step of a shutdown.
type shutdownStep struct {
	sig   syscall.Signal
	grace time.Duration
}

var (
	// fastShutdown rolls back open transactions and checkpoints (SIGINT),
	// escalating to immediate (SIGQUIT) and then SIGKILL.
	fastShutdown = []shutdownStep{{syscall.SIGINT, 30 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
	// immediateShutdown is for a server whose data is about to be removed.
	immediateShutdown = []shutdownStep{{syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
)
