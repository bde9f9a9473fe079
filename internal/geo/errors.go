package geo

import "errors"

var (
	// ErrFormat is wrapped by every error about the content of a file: a
	// header without the needed columns, a malformed row under Strict, a
	// record over the size limit.
	ErrFormat = errors.New("malformed geolocation file")

	// ErrLimit is wrapped when a file exceeds MaxRows or MaxBytes.
	ErrLimit = errors.New("geolocation file over its limit")
)
