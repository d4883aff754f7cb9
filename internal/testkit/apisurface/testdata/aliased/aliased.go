package aliased

import (
	"bytes"

	"github.com/schemastate/schemastate/internal/testkit/apisurface/testdata/aliased/internal/inner"
)

type T = inner.T

type B = bytes.Buffer
