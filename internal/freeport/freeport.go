// Package freeport picks loopback ports for the servers that tests and the
// benchmark start. The kernel hands a port given back by a listener that
// closed to the next one that asks for any, often at once, so a picker
// that only listens and closes can give two servers started side by side
// the same port; Pick never gives a port twice in a process. Another
// process may still take a picked port before the server binds it: a
// caller that starts a server of its own retries on another.
package freeport

import (
	"fmt"
	"net"
	"sync"
)

var picked = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Pick returns a port on 127.0.0.1 that nothing listens on now and that
// Pick has not returned before in this process.
func Pick() (int, error) {
	picked.Lock()
	defer picked.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("freeport: find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("freeport: give port %d back: %w", port, err)
		}
		if !picked.ports[port] {
			picked.ports[port] = true
			return port, nil
		}
	}
}
