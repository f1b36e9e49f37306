// Package knowledge answers the SQL lookups of omlet rules from a database:
// SQLite (embedded, pure Go), PostgreSQL or MySQL/MariaDB, through
// database/sql. It implements omlet.Knowledge.
//
// It follows the Rust host's knowledge crate (host/knowledge): a rule's
// statements are checked at Bind against the same SQL allow-list (the
// guard: one SELECT form, the tables and functions the configuration
// allows, never the catalog), rewritten for the database (placeholders,
// the OML helper functions), and prepared, so that a missing table or
// column fails the rule's load naming the statement's file, line and
// column. Each lookup then runs under the query timeout, through a
// bounded answer cache, and fails as on_lookup_error says.
//
// Constructors: Open (a URL), FromDB (a *sql.DB of the embedder's),
// LoadKnowdb (a knowdb folder into an in-memory SQLite), OpenConfig (the
// knowledge config file of the CLI's --knowledge) and FromTables (tables
// given in memory, as the conformance corpus gives them).
package knowledge
