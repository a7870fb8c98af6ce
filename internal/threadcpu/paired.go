package threadcpu

import (
	"slices"
	"time"
)

// Paired times a baseline and a subject in alternating blocks on the
// calling thread, for the benchmarks that report a ratio measured in one
// run. The two take turns going first, so neither is always the one that
// finds the data in the cache. The median of the blocks' ratios is what a
// burst of load on a shared machine moves least.
type Paired struct {
	Base, Subject         time.Duration // CPU time over all blocks
	BaseWall, SubjectWall time.Duration // wall time over all blocks
	ratios, wall          []float64
	blocks                int
}

// Block times one run of base and one of subject.
func (p *Paired) Block(base, subject func()) {
	var b, s, bw, sw time.Duration
	if p.blocks%2 == 0 {
		b, bw = timed(base)
		s, sw = timed(subject)
	} else {
		s, sw = timed(subject)
		b, bw = timed(base)
	}
	p.blocks++
	p.Base += b
	p.Subject += s
	p.BaseWall += bw
	p.SubjectWall += sw
	if b > 0 && s > 0 {
		p.ratios = append(p.ratios, float64(b)/float64(s))
	}
	p.wall = append(p.wall, float64(bw)/float64(max(sw, 1)))
}

// Ratio is the median over the blocks of base's CPU time over subject's:
// how many times faster the subject is.
func (p *Paired) Ratio() float64 { return median(p.ratios) }

// WallRatio is Ratio in wall time.
func (p *Paired) WallRatio() float64 { return median(p.wall) }

func timed(f func()) (cpu, wall time.Duration) {
	c0, t0 := Now(), time.Now()
	f()
	return Now() - c0, time.Since(t0)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
