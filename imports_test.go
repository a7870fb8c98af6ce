package queengate

import (
	"testing"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
)

// TestImportRegistersEverything: importing the module root, as xcaddy's
// generated main does, registers every queengate module and the `caddy
// queen` command with its subcommands.
func TestImportRegistersEverything(t *testing.T) {
	for _, id := range []string{
		"queen",
		"http.handlers.queen_gateway",
		"http.reverse_proxy.upstreams.queen",
		"tls.permission.queen",
	} {
		if _, err := caddy.GetModule(id); err != nil {
			t.Errorf("module %s is not registered: %v", id, err)
		}
	}
	queen, ok := caddycmd.Commands()["queen"]
	if !ok {
		t.Fatal("the `caddy queen` command is not registered")
	}
	if queen.CobraFunc == nil {
		t.Fatal("`caddy queen` has no subcommands")
	}
}
