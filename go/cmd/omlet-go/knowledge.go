package main

import (
	"context"
	"fmt"

	omlet "example.invalid/omlet/go"
	"example.invalid/omlet/go/knowledge"
)

// openKnowledge is the knowledge of --knowdb (knowdb folders loaded into an
// in-memory SQLite database) or of --knowledge (a knowledge config file);
// nil when neither is given.
func openKnowledge(ctx context.Context, knowdb []string, config string) (omlet.Knowledge, error) {
	switch {
	case config != "":
		return knowledge.OpenConfig(ctx, config)
	case len(knowdb) == 1:
		return knowledge.LoadKnowdb(ctx, knowdb[0])
	case len(knowdb) > 1:
		return nil, fmt.Errorf("configuration: more than one --knowdb is not supported by omlet-go yet")
	}
	return nil, nil
}
