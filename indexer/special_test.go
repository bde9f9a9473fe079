package indexer

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/egress/egresstest"
	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
)

// TestCrawlAPIRefusesSpecial: `micra indexer crawl`, that is
// POST /api/crawl, with seeds on each special-purpose class and one name
// resolving to a private address: each is refused with an error naming
// its class; none is delegated, and none is kept pending for resubmission.
// A seed not refused, in the same request, is kept; so it is beside URLs
// that are not crawlable, each failed alone with what is wrong with it.
func TestCrawlAPIRefusesSpecial(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		n := newTNode(t, net, 0, nil, nil, overlay.Egress(egress.Policy{})) // micra indexer's default
		intranet := func(c *config) error { c.resolve = egresstest.Resolve; return nil }
		ix := startIndexer(t, n, intranet)
		name := "http://" + egresstest.Intranet + "/"
		classes := map[string]string{name: egresstest.IntranetClass}
		urls := []string{name}
		for _, c := range egresstest.Special() {
			urls = append(urls, c.URL())
			classes[c.URL()] = c.Class
		}
		const public = "http://unknown.example/" // not refused: kept, though it does not resolve yet
		for _, bad := range []string{"ftp://example.com/", "example.com/no-scheme"} {
			urls = append(urls, bad)
			classes[bad] = "is not an http(s) URL"
		}
		body, _ := json.Marshal(map[string]any{"urls": append(urls, public)})
		rec := httptest.NewRecorder()
		ix.Handler(index.HTTPOptions{}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/crawl", bytes.NewReader(body)))
		var out struct {
			Sent          int `json:"sent"`
			Later, Failed []struct{ URL, Error string }
		}
		// The public name is kept and sent again later: not a failure.
		if err := json.NewDecoder(rec.Body).Decode(&out); err != nil || rec.Code != http.StatusOK || out.Sent != 0 || len(out.Failed) != len(urls) ||
			len(out.Later) != 1 || out.Later[0].URL != public {
			t.Fatalf("POST /api/crawl: %d %+v %v", rec.Code, out, err)
		}
		for _, f := range out.Failed {
			if !strings.Contains(f.Error, classes[f.URL]) || strings.Contains(f.Error, "malformed") {
				t.Errorf("%s: %q, want a refusal naming %q", f.URL, f.Error, classes[f.URL])
			}
		}
		if got := ix.Pending(); got != 1 {
			t.Errorf("%d crawl requests kept pending, want the one not refused only", got)
		}
		k := n.o.Stats().Kinds
		if d := k["micra/DELEGATE"]; d != 0 || len(n.o.Owned()) != 0 {
			t.Errorf("%d delegation requests, subnets delegated: %v", d, n.o.Owned())
		}
	})
}
