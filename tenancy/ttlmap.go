package tenancy

import (
	"sync"
	"time"
)

// ttlMap is a small bounded map whose entries expire. When full, expired
// entries are pruned; if it is still full the new entry is not kept, so
// memory stays bounded under any key flood and existing answers survive.
type ttlMap[K comparable, V any] struct {
	mu      sync.Mutex
	entries map[K]ttlEntry[V]
	max     int
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLMap[K comparable, V any](max int) *ttlMap[K, V] {
	return &ttlMap[K, V]{entries: map[K]ttlEntry[V]{}, max: max}
}

func (m *ttlMap[K, V]) get(k K, now time.Time) (V, bool) {
	m.mu.Lock()
	e, ok := m.entries[k]
	m.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (m *ttlMap[K, V]) put(k K, v V, expires, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[k]; !ok && len(m.entries) >= m.max {
		for key, e := range m.entries {
			if !now.Before(e.expires) {
				delete(m.entries, key)
			}
		}
		if len(m.entries) >= m.max {
			return
		}
	}
	m.entries[k] = ttlEntry[V]{value: v, expires: expires}
}

func (m *ttlMap[K, V]) deleteIf(drop func(K, V) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, e := range m.entries {
		if drop(k, e.value) {
			delete(m.entries, k)
		}
	}
}
