//go:build unix

package meter

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f: blocking when wait is set, else
// failing at once when someone else holds it. flock locks belong to the
// open file, so two opens in one process exclude each other too.
func lockFile(f *os.File, wait bool) error {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
