// Command fakebroker serves queengate's in-memory fake Queen broker, for
// development and manual testing of the gateway without a real broker.
//
//	fakebroker -listen 127.0.0.1:6632 [-tenancy rust] [-ignore-tenant] [-name cell-a] [-require-tenant]
//	           [-token SECRET] [-no-request-log] [-discard-completed]
//
// Everything is kept in memory and lost when the process exits. It says at
// start which tenancy mode it is in: by default it scopes by x-queen-tenant
// (a broker started with QUEEN_TENANCY_HEADER=true); -ignore-tenant gives the
// public Queen 0.15 broker's mode, one namespace for every caller; -tenancy rust
// follows the tenancy contract of Queen's Rust brokers (QUEEN_TENANCY_HEADER=true
// with QUEEN_KV_TRUSTED_PROXY=1): the header trimmed and lower-cased, a request
// without it served as the default tenant, real HTTP statuses, and KV, timers,
// locks and ephemeral queues behind per-tenant grants.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/queengate/queengate/internal/fakebroker"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:6632", "address to listen on")
	name := flag.String("name", "", "server id reported by /health (default \"fakebroker\")")
	tenancy := flag.String("tenancy", "", "\"rust\": follow the tenancy contract of Queen's Rust brokers (default: this fake's own model)")
	requireTenant := flag.Bool("require-tenant", false, "refuse tenant-scoped requests without the x-queen-tenant header (no real broker does this)")
	ignoreTenant := flag.Bool("ignore-tenant", false, "ignore x-queen-tenant, one namespace for all, like the public 0.15.1 broker")
	token := flag.String("token", "", "require \"Authorization: Bearer <token>\" (a static secret no real broker checks; default: no auth)")
	kvBytes := flag.Bool("report-kv-bytes", false, "add kvBytes/timerBytes to GET /api/v1/resources/queues")
	noLog := flag.Bool("no-request-log", false, "keep no request log (for load benchmarks)")
	discard := flag.Bool("discard-completed", false, "remove messages as soon as an autoAck pop completes them (for load benchmarks)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fakebroker: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}

	if *tenancy != "" && *tenancy != fakebroker.TenancyRust {
		fmt.Fprintf(os.Stderr, "fakebroker: -tenancy must be %q or empty\n", fakebroker.TenancyRust)
		os.Exit(2)
	}
	if *tenancy == fakebroker.TenancyRust && (*requireTenant || *token != "") {
		fmt.Fprintln(os.Stderr, "fakebroker: -require-tenant and -token model no Rust broker; do not combine them with -tenancy rust")
		os.Exit(2)
	}
	b := fakebroker.New(fakebroker.Options{
		Tenancy:            *tenancy,
		Name:               *name,
		RequireTenant:      *requireTenant,
		IgnoreTenant:       *ignoreTenant,
		Token:              *token,
		ReportKVTimerBytes: *kvBytes,
		NoRequestLog:       *noLog,
		DiscardCompleted:   *discard,
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("fakebroker: %v", err)
	}
	log.Printf("queengate fake broker (in-memory, for development only) listening on http://%s", l.Addr())
	switch {
	case *ignoreTenant:
		log.Printf("mode: no tenancy, like the public Queen 0.15 broker (x-queen-tenant ignored: a gateway serves one cluster on this cell)")
	case *tenancy == fakebroker.TenancyRust:
		log.Printf("mode: the tenancy contract of Queen's Rust brokers (QUEEN_TENANCY_HEADER=true, QUEEN_KV_TRUSTED_PROXY=1): a request without x-queen-tenant is served as the default tenant")
	default:
		log.Printf("mode: tenancy by x-queen-tenant, like a broker started with QUEEN_TENANCY_HEADER=true (-ignore-tenant for the public broker's mode)")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		log.Printf("fakebroker: shutting down")
		_ = b.Close()
	}()
	if err := b.Serve(l); err != nil {
		log.Fatalf("fakebroker: %v", err)
	}
}
