package webhook_test

import (
	"os"
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
