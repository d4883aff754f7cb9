package transcript_test

import "errors"

// limitFileSize: Windows has no per-process file-size limit.
func limitFileSize(uint64) error { return errors.New("no RLIMIT_FSIZE on windows") }

const canLimitFileSize = false
