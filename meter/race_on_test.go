//go:build race

package meter

// underRace is whether the tests run under the race detector, which slows
// the exhaustive ones tenfold: they check a share of their cases there
// (and all of them in the run without it).
const underRace = true
