package subnet

import (
	"errors"
	"fmt"
)

var (
	// ErrMalformed marks a line or object of an input that does not follow
	// its format. Errors wrapping it name the input and line.
	ErrMalformed = errors.New("malformed input")

	// ErrUnknownFormat is returned when an input's format cannot be detected.
	ErrUnknownFormat = errors.New("unknown input format")

	// ErrCorruptSnapshot is returned when a snapshot fails to decode or its
	// content does not match its hash.
	ErrCorruptSnapshot = errors.New("corrupt snapshot")

	// ErrTooLarge is returned when an input exceeds a configured size limit.
	ErrTooLarge = errors.New("input too large")

	// ErrBadPart is returned when a part to delegate apart is not inside
	// the range of the address it is searched for.
	ErrBadPart = errors.New("not a part of the range")

	// ErrBadRelease is returned for a release, or a release key, that does
	// not follow its format.
	ErrBadRelease = errors.New("malformed release")

	// ErrUntrustedRelease is returned for a release not signed by a
	// configured release key, or whose signature does not verify.
	ErrUntrustedRelease = errors.New("untrusted release")

	// ErrReleaseTime is returned for a release whose publication or
	// activation time is out of bounds.
	ErrReleaseTime = errors.New("release time out of bounds")

	// ErrReleaseParent is returned for a release that does not replace the
	// snapshot the node runs.
	ErrReleaseParent = errors.New("release for another snapshot")

	// ErrReleaseFile is returned for snapshot bytes that are not the file a
	// release names.
	ErrReleaseFile = errors.New("snapshot file does not match its release")
)

func errCorrupt(what string) error { return fmt.Errorf("%w: %s", ErrCorruptSnapshot, what) }

// LineError is a problem with one line of an input.
type LineError struct {
	Input  string // the input's name, usually its path
	Line   int    // 1-based; the first line of the object for RPSL
	Reason string // what is wrong, in lowercase
}

// Error returns "input:line: reason".
func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Input, e.Line, e.Reason)
}

// Unwrap makes errors.Is(err, ErrMalformed) hold for line errors.
func (e *LineError) Unwrap() error { return ErrMalformed }
