// Package urlnorm resolves and normalises URLs found in pages, following the
// WHATWG URL standard (github.com/nlnwa/whatwg-url, which passes the
// web-platform-tests URL vectors) and then applying crawler canonicalisation:
// fragments and credentials removed, session identifiers stripped, only http
// and https kept, length bounded.
//
// Functions are pure and safe for concurrent use.
package urlnorm

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	wurl "github.com/nlnwa/whatwg-url/url"
)

// MaxLength is the longest normalised URL accepted, in bytes. Longer URLs
// are almost always traps or tracking junk; 2048 is what major search
// engines index.
const MaxLength = 2048

// Errors returned for unusable URLs.
var (
	ErrScheme  = errors.New("url scheme is not http or https")
	ErrTooLong = errors.New("url too long")
	ErrNoHost  = errors.New("url has no host")
	ErrInvalid = errors.New("invalid url")
)

var parser = wurl.NewParser()

// sessionKeys are query keys (lower case) that carry session identifiers.
var sessionKeys = map[string]bool{
	"jsessionid": true, "phpsessid": true, "sid": true, "sessionid": true,
	"session_id": true, "sessid": true, "cfid": true, "cftoken": true,
	"oscsid": true, "zenid": true, "aspsessionid": true, "s_sid": true,
}

// Base is a parsed page URL against which references are resolved.
type Base struct{ u *wurl.Url }

// NewBase parses an absolute URL to resolve references against.
func NewBase(raw string) (*Base, error) {
	u, err := parser.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Base{u: u}, nil
}

// Resolve resolves ref (an href value) against b and normalises it.
func (b *Base) Resolve(ref string) (string, error) {
	ref = strings.TrimSpace(ref)
	if len(ref) > 4*MaxLength {
		return "", ErrTooLong
	}
	u, err := parser.BasicParser(ref, b.u, nil, wurl.NoState)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return finish(u)
}

// Normalize parses an absolute URL and normalises it.
func Normalize(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if len(raw) > 4*MaxLength {
		return "", ErrTooLong
	}
	u, err := parser.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return finish(u)
}

// Parse normalises raw and returns it as a net/url URL, as the fetcher
// needs it.
func Parse(raw string) (*url.URL, error) {
	s, err := Normalize(raw)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return u, nil
}

func finish(u *wurl.Url) (string, error) {
	switch u.Scheme() {
	case "http", "https":
	default:
		return "", ErrScheme
	}
	if u.Hostname() == "" {
		return "", ErrNoHost
	}
	u.SetHash("")
	u.SetUsername("")
	u.SetPassword("")
	if p := u.Pathname(); strings.Contains(p, ";") {
		u.SetPathname(stripPathSession(p))
	}
	if q := u.Query(); q != "" {
		if s := stripQuerySession(q); s != q {
			u.SetSearch(s)
		}
	}
	s := u.Href(true)
	s = strings.TrimSuffix(s, "?")
	if len(s) > MaxLength {
		return "", ErrTooLong
	}
	// net/url must accept what we hand on to the fetcher.
	if _, err := url.Parse(s); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s, nil
}

// stripPathSession removes ";jsessionid=..." style path parameters.
func stripPathSession(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		j := strings.IndexByte(seg, ';')
		if j < 0 {
			continue
		}
		params := strings.Split(seg[j+1:], ";")
		kept := params[:0]
		for _, pr := range params {
			k, _, _ := strings.Cut(pr, "=")
			if !sessionKeys[strings.ToLower(k)] {
				kept = append(kept, pr)
			}
		}
		if len(kept) == 0 {
			segs[i] = seg[:j]
		} else {
			segs[i] = seg[:j] + ";" + strings.Join(kept, ";")
		}
	}
	return strings.Join(segs, "/")
}

// stripQuerySession removes session keys from a query, leaving every other
// byte of it as it was.
func stripQuerySession(q string) string {
	parts := strings.Split(q, "&")
	kept := parts[:0]
	changed := false
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		lk := strings.ToLower(k)
		if sessionKeys[lk] || strings.HasPrefix(lk, "aspsessionid") {
			changed = true
			continue
		}
		kept = append(kept, p)
	}
	if !changed {
		return q
	}
	return strings.Join(kept, "&")
}

// HostKey returns the politeness key of a normalised URL: lower-case host
// and the port if it is not the scheme's default.
func HostKey(u *url.URL) string {
	h := strings.ToLower(u.Hostname())
	p := u.Port()
	if p == "" || (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + p
	}
	return h + ":" + p
}
