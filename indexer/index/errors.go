package index

import "errors"

// Errors returned by the index. Match them with errors.Is; most are wrapped
// with the detail that caused them.
var (
	// ErrClosed: the index was closed.
	ErrClosed = errors.New("index closed")
	// ErrInvalidRecord: a record fails the schema: bad URL, time, change
	// kind or status, or it is too large once its bounds are applied.
	ErrInvalidRecord = errors.New("invalid record")
	// ErrNotFound: no record, tombstone or profile has that name or URL.
	ErrNotFound = errors.New("not found")
	// ErrGone: the page was removed (a ChangeGone record); a tombstone is kept.
	ErrGone = errors.New("page gone")
	// ErrBadQuery: the query is empty once stop words are removed, has no
	// positive term, or exceeds the query bounds.
	ErrBadQuery = errors.New("bad query")
	// ErrBadProfile: a profile has a bad name, keyword, weight or threshold,
	// or exceeds the profile bounds.
	ErrBadProfile = errors.New("bad profile")
	// ErrTooManyProfiles: the profile limit is reached.
	ErrTooManyProfiles = errors.New("too many profiles")
	// ErrCorruptValue: a stored value or key cannot be decoded.
	ErrCorruptValue = errors.New("corrupt index value")
	// ErrSchema: the stored index was written by an incompatible version.
	ErrSchema = errors.New("unsupported index schema version")
)
