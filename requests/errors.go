package requests

import "errors"

// Errors of URL delivery. Match them with errors.Is; most are wrapped
// with the detail that caused them.
var (
	// ErrMalformed: a frame or request does not decode or breaks the
	// protocol's bounds (sizes, counts, schemes, receipts).
	ErrMalformed = errors.New("malformed crawl request message")
	// ErrUnsupportedVersion: a frame of a version this build does not
	// speak.
	ErrUnsupportedVersion = errors.New("unsupported crawl request message version")
	// ErrNotTaken: the node owning a request's subnet did not take it
	// now (it would not crawl it in time: its queue for the host is
	// full, or it is not crawling); it may be sent again later.
	ErrNotTaken = errors.New("crawl request not taken now")
)
