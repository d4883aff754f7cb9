package postgres

// tableFacts are the live catalog facts planning needs beyond Atlas's
// inspection of the table, read by driver.facts so that planning itself
// reads nothing.
type tableFacts struct {
	// deferrable names the table's DEFERRABLE unique constraints
	//: no ON CONFLICT arbiter, so never the declared key.
	deferrable map[string]bool
	// invalid names the table's INVALID indexes: a build that
	// crashed or failed.
	invalid []string
	// size is the live table's size, which chooses the path.
	size tableSize
	// rebuild is what the shadow-table rebuild needs to know.
	rebuild *rebuildFacts
	// notValid names the table's NOT VALID checks and foreign keys
	//: a recipe stopped before its validation.
	notValid map[string]bool
	// sameDefault names the columns whose live default is the declared one
	// as the server prints it back, though the text differs (PostgreSQL:
	// gen_random_uuid()::text reads back as (gen_random_uuid())::text).
	sameDefault map[string]bool
	// checks are the live and declared checks as the server normalizes
	// them: what the diff and the recipes' done-checks compare.
	checks *checkFacts
	// deferrableFKs names the table's DEFERRABLE foreign keys,
	// which Atlas does not tell from the declared ones.
	deferrableFKs map[string]bool
	// newTable is a shadow-table rebuild's new table, when one exists
	//.
	newTable *shadowTable
}
