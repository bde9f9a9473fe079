package crawl

import (
	"errors"

	"github.com/micra-net/micra/egress"
)

// Errors returned by the crawler and the fetcher. Match them with errors.Is.
var (
	// ErrForbiddenDestination: the egress guard refused the address or port
	// (special-purpose ranges, ports other than 80/443 by default).
	ErrForbiddenDestination = egress.ErrForbidden
	// ErrScheme: only http and https URLs are fetched.
	ErrScheme = errors.New("unsupported url scheme")
	// ErrTooManyRedirects: more than the configured redirects (at most 5).
	ErrTooManyRedirects = errors.New("too many redirects")
	// ErrRedirectRefused: the redirect check hook declined the next hop.
	ErrRedirectRefused = errors.New("redirect refused")
	// ErrBodyTooLarge: Content-Length exceeds the wire size cap.
	ErrBodyTooLarge = errors.New("response body too large")
	// ErrContentEncoding: an unsupported Content-Encoding, or a body that is
	// not what its Content-Encoding says (a corrupt or absent stream).
	ErrContentEncoding = errors.New("unsupported content encoding")
	// ErrHeaderTooLarge: the response's headers exceed MaxHeaderBytes.
	ErrHeaderTooLarge = errors.New("response headers too large")
	// ErrRobotsDisallowed: robots.txt forbids the URL.
	ErrRobotsDisallowed = errors.New("disallowed by robots.txt")
	// ErrTransferCap: the bandwidth or daily transfer cap allows no fetch
	// soon enough (Refetch).
	ErrTransferCap = errors.New("transfer cap reached")
	// ErrClosed: the crawler was closed.
	ErrClosed = errors.New("crawler closed")
	// ErrBadRequest: a crawl request is malformed.
	ErrBadRequest = errors.New("bad crawl request")
	// ErrBatchVersion: a batch uses an encoding version this code cannot read.
	ErrBatchVersion = errors.New("unsupported batch version")
	// ErrBatchCorrupt: a batch is truncated, oversized or malformed.
	ErrBatchCorrupt = errors.New("corrupt batch")
	// ErrCorruptValue: a stored value cannot be decoded.
	ErrCorruptValue = errors.New("corrupt stored value")
	// ErrSchema: the stored data were written by an incompatible version.
	ErrSchema = errors.New("unsupported crawl schema version")
)
