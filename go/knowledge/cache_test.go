package knowledge

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	omlet "example.invalid/omlet/go"
)

func TestTheCacheKeepsToItsEntriesAndBytes(t *testing.T) {
	c := newAnswerCache(10, 100_000, 0)
	for i := range 50 {
		c.put(fmt.Sprint(i), omlet.Answer{Found: true, Row: []omlet.Cell{text("x")}}, 1<<20)
	}
	if n, b := c.size(); n != 10 || b > 100_000 {
		t.Fatalf("%d entries, %d bytes", n, b)
	}
	if _, ok := c.get("49"); !ok {
		t.Fatal("the newest was evicted")
	}
	if _, ok := c.get("0"); ok {
		t.Fatal("the oldest was kept")
	}
	big := omlet.Answer{Found: true, Row: []omlet.Cell{text(strings.Repeat("y", 30_000))}}
	for i := range 5 {
		c.put(fmt.Sprint("big", i), big, 1<<20)
	}
	if n, b := c.size(); b > 100_000 || n > 10 {
		t.Fatalf("%d entries, %d bytes", n, b)
	}
	c.put("huge", big, 1000)
	if _, ok := c.get("huge"); ok {
		t.Fatal("an answer over max_entry_bytes was kept")
	}
	ttl := newAnswerCache(10, 100_000, 20*time.Millisecond)
	ttl.put("k", omlet.Answer{}, 1<<20)
	time.Sleep(30 * time.Millisecond)
	if _, ok := ttl.get("k"); ok {
		t.Fatal("an expired entry was served")
	}
}

func TestConcurrentMissesOfOneKeyMakeOneQuery(t *testing.T) {
	c := newAnswerCache(10, 100_000, 0)
	var calls atomic.Int32
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, qe, ok := c.once("k", func() <-chan struct{} { return nil }, func() (omlet.Answer, *omlet.QueryError) {
				calls.Add(1)
				<-release
				return omlet.Answer{Found: true}, nil
			})
			if !ok || qe != nil || !a.Found {
				t.Error(a, qe, ok)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("%d queries", calls.Load())
	}
}

func TestAnswersAreCachedUntilAReload(t *testing.T) {
	ctx := context.Background()
	p := nginxKnowdb(t)
	b, err := p.Bind(ctx, []omlet.Statement{nginxStatement})
	if err != nil {
		t.Fatal(err)
	}
	n := integer(167772167)
	if a, _ := b.Query(ctx, 0, []omlet.Cell{n, n}); !a.Found {
		t.Fatal("no row")
	}
	if entries, _ := p.CachedEntries(); entries != 1 {
		t.Fatalf("%d entries", entries)
	}
	g := b.Generation()
	p.Reload()
	if entries, _ := p.CachedEntries(); entries != 0 || b.Generation() == g {
		t.Fatal("the reload kept the cache or the generation")
	}
}
