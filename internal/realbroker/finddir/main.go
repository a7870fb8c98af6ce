// Command finddir tells scripts/test whether the real broker is there, by
// the same rule as realbroker.Dir: it prints "found <dir>" or
// "missing <why>" and exits 0 either way (any other exit is an error).
//
//	go run ./internal/realbroker/finddir
package main

import (
	"fmt"

	"github.com/queengate/queengate/internal/realbroker"
)

func main() {
	dir, err := realbroker.Dir()
	if err != nil {
		fmt.Println("missing", err)
		return
	}
	fmt.Println("found", dir)
}
