//go:build !unix

package meter

import "os"

// Without flock the spool relies on one meter per spool directory: replay
// does not know which file another process is still appending to.
func lockFile(*os.File, bool) error { return nil }

func unlockFile(*os.File) {}
