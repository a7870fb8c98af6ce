//go:build !race

package limits

const underRace = false
