package tenancy

import (
	"sync"
	"time"
)

// ttlMap is a small bounded map whose entries expire; get does not
// allocate. When full, expired entries are pruned first. What happens when
// it is still full is the owner's choice:
//   - keep (evict false): the new entry is not kept, so existing answers
//     survive any key flood (the identity caches: a miss costs one lookup);
//   - evict (evict true): about an eighth of the entries, chosen
//     arbitrarily, make room, so the newest entry is always kept (cell
//     tokens: a miss would mean minting on every request).
type ttlMap[K comparable, V any] struct {
	mu      sync.RWMutex
	entries map[K]ttlEntry[V]
	max     int
	evict   bool
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLMap[K comparable, V any](max int) *ttlMap[K, V] {
	return &ttlMap[K, V]{entries: map[K]ttlEntry[V]{}, max: max}
}

// newEvictingTTLMap is a ttlMap that makes room for every new entry.
func newEvictingTTLMap[K comparable, V any](max int) *ttlMap[K, V] {
	m := newTTLMap[K, V](max)
	m.evict = true
	return m
}

func (m *ttlMap[K, V]) get(k K, now time.Time) (V, bool) {
	m.mu.RLock()
	e, ok := m.entries[k]
	m.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.value, true
}

func (m *ttlMap[K, V]) put(k K, v V, expires, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[k]; !ok && len(m.entries) >= m.max && !m.makeRoomLocked(now) {
		return
	}
	m.entries[k] = ttlEntry[V]{value: v, expires: expires}
}

// makeRoomLocked prunes expired entries, then, if the map evicts, drops
// arbitrary ones; it reports whether a new entry fits.
func (m *ttlMap[K, V]) makeRoomLocked(now time.Time) bool {
	for key, e := range m.entries {
		if !now.Before(e.expires) {
			delete(m.entries, key)
		}
	}
	if len(m.entries) < m.max {
		return true
	}
	if !m.evict {
		return false
	}
	target := m.max - max(m.max/8, 1)
	for key := range m.entries {
		if len(m.entries) <= target {
			break
		}
		delete(m.entries, key)
	}
	return true
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

// len returns the number of entries, expired ones included.
func (m *ttlMap[K, V]) len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}
