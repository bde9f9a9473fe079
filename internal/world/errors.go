package world

import "errors"

var (
	// ErrNotLoopback is returned when an address outside 127.0.0.0/8 is
	// given where the world would bind, dial from or answer for. The world
	// never binds or sends anything outside loopback.
	ErrNotLoopback = errors.New("address is not in 127.0.0.0/8")

	// ErrParams is wrapped by every rejection of invalid Params or options.
	ErrParams = errors.New("invalid world parameters")

	// ErrNoData is returned when the real data the world needs (the latency
	// matrix, and the registry files for a world derived from real data)
	// cannot be found or read.
	ErrNoData = errors.New("world data not found")

	// ErrBadData is wrapped when a data file is present but malformed.
	ErrBadData = errors.New("malformed world data")

	// ErrSpecMismatch is returned by Load when the spec in a directory does
	// not match the world its parameters generate (edited by hand, or
	// generated from different data).
	ErrSpecMismatch = errors.New("world spec does not match its parameters")

	// ErrAddrInUse is returned by Start when an address and port of the
	// world is already bound by another process or another world.
	ErrAddrInUse = errors.New("world address already in use")

	// ErrTooManyFiles is returned by Start when the open-file limit cannot
	// be raised enough for one listener per site.
	ErrTooManyFiles = errors.New("open-file limit too low for this world")

	// ErrUnknownSite is returned for a site name or address the world does
	// not have.
	ErrUnknownSite = errors.New("unknown site")
)
