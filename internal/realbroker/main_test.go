//go:build realbroker

package realbroker

import (
	"os"
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
