//go:build race

package limits

// underRace is whether the tests run under the race detector, which slows
// the long differential ones twentyfold: they take a share of their steps
// there (and all of them in the run without it, which CI makes too).
const underRace = true
