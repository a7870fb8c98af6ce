package limits

// PushBlock is why pushes to a cluster are refused, if they are. Every
// cause is hard: it applies in shadow mode too.
type PushBlock uint8

// The causes, in the order they are reported when several apply.
const (
	PushOpen           PushBlock = iota // pushes allowed
	PushBlockedStorage                  // retained bytes over max_retained_bytes
	PushBlockedMonthly                  // monthly message quota exhausted
	PushBlockedBilling                  // billing hold: tenant in grace or cluster push_blocked
)

// PushBlockSource reports a live push-block flag for a cluster (the storage
// pump, the monthly quota chain). It must answer from memory: it runs on
// the request path.
type PushBlockSource interface {
	PushBlock(clusterID string) PushBlock
}

// DecidePushBlock returns the one cause reported for a cluster: a flag from
// the sources (storage first, then monthly), else the billing hold.
func DecidePushBlock(clusterID string, billingHold bool, sources []PushBlockSource) PushBlock {
	verdict := PushOpen
	for _, s := range sources {
		if b := s.PushBlock(clusterID); b != PushOpen && (verdict == PushOpen || b < verdict) {
			verdict = b
		}
	}
	if verdict != PushOpen {
		return verdict
	}
	if billingHold {
		return PushBlockedBilling
	}
	return PushOpen
}
