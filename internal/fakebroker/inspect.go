package fakebroker

import "sort"

// QueueNames returns the names of the queues tenantID (empty =
// DefaultTenant) holds, sorted: what a test checks a probe or a cleanup
// left behind.
func (b *Broker) QueueNames(tenantID string) []string {
	if tenantID == "" {
		tenantID = DefaultTenant
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenants[tenantID]
	if t == nil {
		return nil
	}
	names := make([]string, 0, len(t.queues))
	for name := range t.queues {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
