package caddymodule

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/limits"
)

// limitStates holds the in-memory limit state under one fixed key, so that
// every configuration (a reload with an unchanged or a changed Caddyfile)
// shares it: a reload must not refill a bucket that a burst just emptied,
// forget parked pops, or lose the redelivery memory.
var limitStates = caddy.NewUsagePool()

const limitStateKey = "queen-limits"

// limitState is the cell's process-local limit state.
type limitState struct {
	buckets      *limits.Buckets
	parked       *limits.Parked
	redeliveries *limits.Redeliveries
}

func (*limitState) Destruct() error { return nil }

func acquireLimitState(cellMaxParked int) (*limitState, error) {
	v, _, err := limitStates.LoadOrNew(limitStateKey, func() (caddy.Destructor, error) {
		return &limitState{
			buckets:      limits.NewBuckets(nil),
			parked:       limits.NewParked(cellMaxParked),
			redeliveries: limits.NewRedeliveries(0, 0, nil),
		}, nil
	})
	if err != nil {
		return nil, err
	}
	s := v.(*limitState)
	s.parked.SetCellCap(cellMaxParked)
	return s, nil
}

// collectIdle drops limit state of clusters that have been quiet; it is
// cheap to call on every request and does work at most every two minutes.
func (s *limitState) collectIdle() {
	if _, ran := s.buckets.MaybeCollectIdle(10*time.Minute, 2*time.Minute); ran {
		s.redeliveries.Collect()
	}
}
