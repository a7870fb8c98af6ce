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
