package dsn

// Reasons are the texts a PostgreSQL URL is refused with.
var Reasons = []string{reasonEscape, reasonHost, reasonPort, reasonSyntax, reasonAt}
