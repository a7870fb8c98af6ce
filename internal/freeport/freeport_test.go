package freeport

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// Servers started side by side are never handed one port, though the
// kernel hands a closed listener's port out again often (over 500 picks
// here, 11 to 22 times), and a picked port is one a server can bind.
func TestPickNeverGivesAPortTwice(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 125 {
				port, err := Pick()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[port] {
					t.Errorf("port %d picked twice", port)
				}
				seen[port] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	port, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("a picked port cannot be bound: %v", err)
	}
	l.Close()
}
