package main

import (
	"errors"
	"fmt"
	"net"
	"testing"
)

// A process that could not listen because a port picked for it was taken
// meanwhile is started again on other ports; any other failure, or a third
// taken port, is returned as it is.
func TestRetryTakenPortPicksOtherPorts(t *testing.T) {
	// Hold a port, as the batch front did, and hand it to the process.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	starts := 0
	start := func() error {
		starts++
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return fmt.Errorf("caddy exited; its log ends:\n%w", err)
		}
		return l.Close()
	}
	if err := retryTakenPort([]*int{&port}, start); err != nil {
		t.Fatalf("started %d times: %v", starts, err)
	}
	if starts != 2 || port == held.Addr().(*net.TCPAddr).Port {
		t.Fatalf("started %d times, last on port %d (the held one is %d)", starts, port, held.Addr().(*net.TCPAddr).Port)
	}

	other := errors.New("did not answer within a minute")
	starts = 0
	if err := retryTakenPort([]*int{&port}, func() error { starts++; return other }); err != other || starts != 1 {
		t.Fatalf("another failure: %v after %d starts, want it at once", err, starts)
	}
	starts = 0
	taken := errors.New("bind: address already in use")
	if err := retryTakenPort([]*int{&port}, func() error { starts++; return taken }); err != taken || starts != 3 {
		t.Fatalf("always taken: %v after %d starts, want it after 3", err, starts)
	}
}
