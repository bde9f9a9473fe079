package crawl

import "github.com/micra-net/micra/crawl/internal/urlnorm"

// NormalizeURL returns rawURL as the crawler keys it — the URL of the
// records it makes of the page — or an error for a URL it would refuse
// (not http(s), no host, too long).
func NormalizeURL(rawURL string) (string, error) {
	u, err := urlnorm.Parse(rawURL)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}
