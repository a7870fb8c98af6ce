package docs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/queengate/queengate/migrations"
)

// The sample output of caddy queen migrate in upgrading.md is what the
// command prints for the migrations this build embeds.
func TestUpgradingSampleNamesEveryMigration(t *testing.T) {
	raw, err := os.ReadFile("upgrading.md")
	if err != nil {
		t.Fatal(err)
	}
	names := migrations.Names()
	want := fmt.Sprintf("database is up to date (%d migrations, latest %s)", len(names), names[len(names)-1])
	if !strings.Contains(string(raw), want) {
		t.Fatalf("upgrading.md's sample output of caddy queen migrate is not %q", want)
	}
}

// Every migration of queengate's own (012 on) is in upgrading.md's table of
// what it adds, so that an operator switching from queen_proxy reads what
// each one changes.
func TestUpgradingTableNamesEveryOwnMigration(t *testing.T) {
	raw, err := os.ReadFile("upgrading.md")
	if err != nil {
		t.Fatal(err)
	}
	own := 0
	for _, n := range migrations.Names() {
		if n < "012" {
			continue
		}
		own++
		if !strings.Contains(string(raw), "| `"+n+"` |") {
			t.Errorf("upgrading.md's table of queengate's migrations has no row | `%s` | saying what it adds", n)
		}
	}
	if own < 7 {
		t.Fatalf("found %d migrations numbered from 012: the list is not what this test expects", own)
	}
}
