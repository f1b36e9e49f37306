// Command postgres is the program docs/embedding-go.md walks through: it
// loads a rule set built with `omlet build --target core`, answers its
// lookups from a PostgreSQL database, and evaluates JSON lines from
// standard input with a few goroutines.
//
//	go run ./examples/postgres rules.wasm 'postgres://app@localhost/inventory' < records.jsonl
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/knowledge"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: postgres RULES.wasm POSTGRES_URL < records.jsonl")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, artifact, url string) error {
	// Lookups: the tables the rules may read, and what a failed lookup does.
	db, err := knowledge.Open(ctx, url, knowledge.Options{
		Tables:        []string{"ip_zone"},
		QueryTimeout:  500 * time.Millisecond,
		OnLookupError: knowledge.Fail,
	})
	if err != nil {
		return err
	}
	defer db.Close()

	wasm, err := os.ReadFile(artifact)
	if err != nil {
		return err
	}
	workers := runtime.GOMAXPROCS(0)
	rule, err := omlet.Load(ctx, wasm, omlet.Options{
		Knowledge:    db,
		MaxInstances: workers, // one instance per goroutine that calls
		CallDeadline: time.Second,
	})
	if err != nil {
		return err // a table the database lacks fails here, naming the rule's line
	}
	defer rule.Close(ctx)

	lines := make(chan []byte)
	var out sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for line := range lines {
				rec, err := omlet.ParseRecord(line)
				if err == nil {
					rec, err = rule.Evaluate(ctx, rec, omlet.Path("/nginx/access_log"))
				}
				out.Lock()
				report(rec, err)
				out.Unlock()
			}
		}()
	}
	scan := bufio.NewScanner(os.Stdin)
	scan.Buffer(make([]byte, 64<<10), 16<<20)
	for scan.Scan() {
		lines <- append([]byte(nil), scan.Bytes()...)
	}
	close(lines)
	wg.Wait()
	return scan.Err()
}

// report prints a record's output line, or why it has none.
func report(rec omlet.Record, err error) {
	var e *omlet.EvalError
	switch {
	case err == nil:
		fmt.Println(rec.JSON())
	case errors.As(err, &e) && e.Kind == omlet.Rejected:
		fmt.Fprintln(os.Stderr, "rejected by the rule:", e.Message)
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
	}
}
