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
