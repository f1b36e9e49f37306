package knowledge

import (
	"container/list"
	"sync"
	"time"

	omlet "example.invalid/omlet/go"
)

// answerCache is the shared answer cache: least recently used first out,
// bounded in entries and in bytes together (each entry counts as at least
// maxBytes/capacity bytes, so neither bound is ever passed, as the Rust
// host's moka cache is weighed), with an optional time to live, and
// single-flight (concurrent misses of one key make one query).
//
// It is written here rather than taken from hashicorp/golang-lru because
// that one bounds entries only: the byte bound, the minimum weight and the
// single-flight would have to be built around it anyway.
type answerCache struct {
	mu       sync.Mutex
	entries  map[string]*list.Element
	order    *list.List // front: most recently used
	bytes    int64
	maxBytes int64
	least    int64
	ttl      time.Duration
	flights  map[string]*flight
}

type cacheEntry struct {
	key     string
	answer  omlet.Answer
	weight  int64
	expires time.Time
}

type flight struct {
	done   chan struct{}
	answer omlet.Answer
	err    *omlet.QueryError
}

func newAnswerCache(capacity, maxBytes int64, ttl time.Duration) *answerCache {
	return &answerCache{
		entries:  map[string]*list.Element{},
		order:    list.New(),
		maxBytes: maxBytes,
		least:    maxBytes / max(capacity, 1),
		ttl:      ttl,
		flights:  map[string]*flight{},
	}
}

// entryBytes estimates what an entry takes: a fixed cost, the key, the row.
func entryBytes(key string, a omlet.Answer) int64 {
	n := int64(128 + len(key) + 24)
	for _, c := range a.Row {
		n += cellBytes(c)
	}
	return n
}

// get is the cached answer of key, if there is one and it is alive.
func (c *answerCache) get(key string) (omlet.Answer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return omlet.Answer{}, false
	}
	e := el.Value.(*cacheEntry)
	if c.ttl > 0 && time.Now().After(e.expires) {
		c.remove(el)
		return omlet.Answer{}, false
	}
	c.order.MoveToFront(el)
	return e.answer, true
}

func (c *answerCache) remove(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.order.Remove(el)
	delete(c.entries, e.key)
	c.bytes -= e.weight
}

// put keeps answer under key unless it weighs more than maxEntry bytes.
func (c *answerCache) put(key string, answer omlet.Answer, maxEntry int64) {
	size := entryBytes(key, answer)
	if size > maxEntry || size > c.maxBytes {
		return
	}
	weight := max(size, c.least)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.remove(el)
	}
	for c.bytes+weight > c.maxBytes && c.order.Len() > 0 {
		c.remove(c.order.Back())
	}
	e := &cacheEntry{key: key, answer: answer, weight: weight}
	if c.ttl > 0 {
		e.expires = time.Now().Add(c.ttl)
	}
	c.entries[key] = c.order.PushFront(e)
	c.bytes += weight
}

// clear drops every entry.
func (c *answerCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = map[string]*list.Element{}
	c.order.Init()
	c.bytes = 0
}

// size is the number of entries and their weight in bytes.
func (c *answerCache) size() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.bytes
}

// once runs fetch for key unless a call for it is already running, in
// which case it waits for that call's answer (or ctx).
func (c *answerCache) once(key string, wait func() <-chan struct{}, fetch func() (omlet.Answer, *omlet.QueryError)) (omlet.Answer, *omlet.QueryError, bool) {
	c.mu.Lock()
	if f, ok := c.flights[key]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.answer, f.err, true
		case <-wait():
			return omlet.Answer{}, nil, false
		}
	}
	f := &flight{done: make(chan struct{})}
	c.flights[key] = f
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.flights, key)
		c.mu.Unlock()
		close(f.done)
	}()
	f.answer, f.err = fetch()
	return f.answer, f.err, true
}
