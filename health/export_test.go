package health

// FloorQuery is floorQuery, for health's own tests and benchmark: the
// measuring stick, no part of a host's API.
var FloorQuery = floorQuery
