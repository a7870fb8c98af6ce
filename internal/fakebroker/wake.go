package fakebroker

// waitKey names the queue a parked pop waits on.
type waitKey struct{ tenant, queue string }

// waitChanLocked returns a channel that is closed at the next wake of the
// queue. Callers hold b.mu.
func (b *Broker) waitChanLocked(tenantID, queueName string) <-chan struct{} {
	k := waitKey{tenantID, queueName}
	ch := b.waiters[k]
	if ch == nil {
		ch = make(chan struct{})
		b.waiters[k] = ch
	}
	return ch
}

// wakeLocked releases the pops parked on a queue so they look again.
// Callers hold b.mu.
func (b *Broker) wakeLocked(tenantID, queueName string) {
	k := waitKey{tenantID, queueName}
	if ch := b.waiters[k]; ch != nil {
		close(ch)
		delete(b.waiters, k)
	}
}
