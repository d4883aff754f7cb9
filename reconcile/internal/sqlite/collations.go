package sqlite

// collationsQuery reads a table's index key parts that sort by another
// collation than BINARY (core.ReadCollations). A declaration names no
// collation, of a column or of an index part, so every declared part sorts
// by BINARY; a part found with another (an index built `(task_id COLLATE
// NOCASE)`, or one that follows a column an operator declared so) makes the
// index another one than the declared: it is a change of the diff, and a
// changed index rebuilds the table from the declared SQL (needsCopy), which
// sorts it by BINARY whatever the live column said.
const collationsQuery = `SELECT il.name, x.seqno + 1, x.coll FROM pragma_index_list(?) il, pragma_index_xinfo(il.name) x
 WHERE x.key = 1 AND x.cid >= 0 AND upper(x.coll) <> 'BINARY'`
