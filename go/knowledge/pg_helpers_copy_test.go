package knowledge

import (
	"errors"
	"io/fs"
	"os"
	"testing"
)

// pg_helpers.sql is a copy of the Rust host's (a Go module embeds files of
// its own folder only): the two hosts must install the same functions.
func TestPgHelpersAreTheRustHostsCopy(t *testing.T) {
	rust, err := os.ReadFile("../../host/knowledge/src/pg_helpers.sql")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("not in an omlet checkout: the Rust host's pg_helpers.sql is not beside this module")
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(rust) != pgHelpersSQL {
		t.Fatal("go/knowledge/pg_helpers.sql differs from host/knowledge/src/pg_helpers.sql: copy it again")
	}
}
