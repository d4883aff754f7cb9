package readonly

import "database/sql"

var sqliteForms = forms{
	isolation: sql.LevelDefault,
	table:     `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)`,
	column:    `SELECT EXISTS (SELECT 1 FROM pragma_table_info(?) WHERE name = ?)`,
}
