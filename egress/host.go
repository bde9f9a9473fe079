package egress

import (
	"net/url"
	"strings"
)

// HostOf returns the host name of a URL, lower-cased, as Policy.CheckHost
// and the result shards compare names; "" when the URL does not parse.
func HostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
