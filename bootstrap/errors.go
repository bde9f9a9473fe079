package bootstrap

import "errors"

var (
	// ErrBadAddr marks a bootstrap entry that is not a multiaddr ending in
	// /p2p/<peer id>. Errors wrapping it name the source and the entry.
	ErrBadAddr = errors.New("bad bootstrap address")

	// ErrNoPeers is returned by Join when it is given no bootstrap peer at
	// all (none configured, none in the environment, an empty default list).
	ErrNoPeers = errors.New("no bootstrap peers configured")

	// ErrNoneAnswered is returned by Join when no bootstrap peer could be
	// reached. The error wrapping it lists every peer's last dial error.
	ErrNoneAnswered = errors.New("no bootstrap peer answered")

	// ErrTooLarge is returned when a bootstrap file or list exceeds the size
	// or entry limits.
	ErrTooLarge = errors.New("bootstrap list too large")
)
