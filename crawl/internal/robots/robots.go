// Package robots compiles a robots.txt file (RFC 9309) once for one crawler
// product token and answers Allowed for many paths without re-parsing.
//
// Parsing is Google's reference parser as ported by
// github.com/jimsmart/grobotstxt (lenient key spelling, line limits, pattern
// escaping); matching uses its Matches function and reproduces its
// RobotsMatcher decision exactly (longest match wins, allow wins ties,
// specific groups shadow the '*' group, rules of repeated groups merge). A
// differential fuzz test checks the equivalence.
package robots

import (
	"strconv"
	"strings"
	"time"

	"github.com/jimsmart/grobotstxt"
)

// MaxSize is the parse limit of RFC 9309 section 2.5: bytes past it are
// ignored.
const MaxSize = 500 << 10

// maxRules bounds the rules kept per group kind, so that a hostile file
// cannot make every Allowed call slow. A 500 KiB file holds at most about
// 50k rules anyway; 20k keeps a check under a few milliseconds.
const maxRules = 20000

type rule struct {
	allow   bool
	pattern string
}

// Rules is a compiled robots.txt. The zero value allows everything. Rules is
// immutable and safe for concurrent use.
type Rules struct {
	specific     []rule
	global       []rule
	seenSpecific bool
	disallowAll  bool
	// CrawlDelay is the Crawl-delay of the group that applies, or 0.
	CrawlDelay time.Duration
	// Sitemaps lists the Sitemap lines (they apply to every agent).
	Sitemaps []string
}

// AllowAll is the result for an unavailable robots.txt (4xx).
func AllowAll() *Rules { return &Rules{} }

// DisallowAll is the result for an unreachable robots.txt (5xx, network
// failure).
func DisallowAll() *Rules { return &Rules{disallowAll: true} }

// DisallowsAll reports whether the rules were built by DisallowAll.
func (r *Rules) DisallowsAll() bool { return r.disallowAll }

// Parse compiles body for the product token agent (such as "micra"). Only
// the first MaxSize bytes are read.
func Parse(body []byte, agent string) *Rules {
	if len(body) > MaxSize {
		body = body[:MaxSize]
	}
	h := &handler{agent: agent, r: &Rules{}}
	grobotstxt.Parse(string(body), h)
	return h.r
}

// Allowed reports whether the URL path-and-query pathQuery (as sent in the
// request line, starting with '/') may be fetched.
func (r *Rules) Allowed(pathQuery string) bool {
	if r.disallowAll {
		return false
	}
	if pathQuery == "" || pathQuery[0] != '/' {
		pathQuery = "/" + pathQuery
	}
	if pathQuery == "/robots.txt" {
		return true // RFC 9309 2.2.2: implicitly allowed.
	}
	if r.seenSpecific {
		a, d := best(r.specific, pathQuery)
		if a > 0 || d > 0 {
			return d <= a
		}
		return true
	}
	a, d := best(r.global, pathQuery)
	if a > 0 || d > 0 {
		return d <= a
	}
	return true
}

func best(rules []rule, path string) (allow, disallow int) {
	allow, disallow = -1, -1
	for _, ru := range rules {
		if ru.allow {
			p := matchAllow(path, ru.pattern)
			if p > allow {
				allow = p
			}
		} else if len(ru.pattern) > disallow && grobotstxt.Matches(path, ru.pattern) {
			disallow = len(ru.pattern)
		}
	}
	return allow, disallow
}

func matchAllow(path, pattern string) int {
	if grobotstxt.Matches(path, pattern) {
		return len(pattern)
	}
	// Google's normalisation: "/dir/index.htm(l)" also allows "/dir/".
	if i := strings.LastIndexByte(pattern, '/'); i >= 0 && strings.HasPrefix(pattern[i:], "/index.htm") {
		p := pattern[:i+1] + "$"
		if grobotstxt.Matches(path, p) {
			return len(p)
		}
	}
	return -1
}

// handler follows grobotstxt.RobotsMatcher's group logic, but records rules
// instead of matching a single path.
type handler struct {
	agent                                   string
	r                                       *Rules
	seenGlobal, seenSpecific, seenSeparator bool
	globalDelay, specificDelay              time.Duration
	hasGlobalDelay, hasSpecificDelay        bool
}

func (h *handler) HandleRobotsStart() {}

func (h *handler) HandleRobotsEnd() {
	if h.r.seenSpecific {
		if h.hasSpecificDelay {
			h.r.CrawlDelay = h.specificDelay
		}
	} else if h.hasGlobalDelay {
		h.r.CrawlDelay = h.globalDelay
	}
}

func (h *handler) HandleUserAgent(_ int, ua string) {
	if h.seenSeparator {
		h.seenGlobal, h.seenSpecific, h.seenSeparator = false, false, false
	}
	if len(ua) >= 1 && ua[0] == '*' && (len(ua) == 1 || isSpace(ua[1])) {
		h.seenGlobal = true
		return
	}
	if strings.EqualFold(productToken(ua), h.agent) {
		h.seenSpecific = true
		h.r.seenSpecific = true
	}
}

func (h *handler) add(allow bool, value string) {
	if !h.seenGlobal && !h.seenSpecific {
		return
	}
	h.seenSeparator = true
	ru := rule{allow: allow, pattern: value}
	if h.seenSpecific {
		if len(h.r.specific) < maxRules {
			h.r.specific = append(h.r.specific, ru)
		}
	} else if len(h.r.global) < maxRules {
		h.r.global = append(h.r.global, ru)
	}
}

func (h *handler) HandleAllow(_ int, v string)    { h.add(true, v) }
func (h *handler) HandleDisallow(_ int, v string) { h.add(false, v) }

func (h *handler) HandleSitemap(_ int, v string) {
	if len(h.r.Sitemaps) < 1000 && v != "" {
		h.r.Sitemaps = append(h.r.Sitemaps, v)
	}
}

func (h *handler) HandleUnknownAction(_ int, action, value string) {
	if !strings.EqualFold(action, "crawl-delay") || (!h.seenGlobal && !h.seenSpecific) {
		return
	}
	// Unlike allow and disallow lines, crawl-delay does not close the
	// user-agent list, exactly as in the reference parser.
	f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || f < 0 || f != f {
		return
	}
	if f > 86400 {
		f = 86400
	}
	d := time.Duration(f * float64(time.Second))
	if h.seenSpecific {
		h.specificDelay, h.hasSpecificDelay = d, true
	} else {
		h.globalDelay, h.hasGlobalDelay = d, true
	}
}

// productToken extracts the matchable part of a user-agent line, as
// grobotstxt does: the leading run of RFC 7231 token characters.
func productToken(ua string) string {
	i := 0
	for ; i < len(ua); i++ {
		c := ua[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("~#$%'*+-.^_`|", c) >= 0) {
			break
		}
	}
	return ua[:i]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == 0x85 || c == 0xA0
}
