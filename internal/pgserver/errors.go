package pgserver

import "errors"

// ErrUnavailable is wrapped by Start's error when no PostgreSQL binaries
// are found; the wrapping message names the places searched and what to
// install. Tests should skip, not fail, on it.
var ErrUnavailable = errors.New("postgresql binaries not found")
