package crawl

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl/internal/corpus"
	"github.com/micra-net/micra/crawl/internal/structured"
	"github.com/micra-net/micra/crawl/internal/textproc"
	"github.com/micra-net/micra/internal/world"
)

// benchPages renders up to 20 pages of each of 60 sites of an emulated
// Internet in which a fraction structured of the sites publish
// structured data.
func benchPages(b *testing.B, structured float64) []*Response {
	b.Helper()
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Hostile, p.Structured = 3, 60, 0, structured
	w, err := world.Generate(context.Background(), p)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var out []*Response
	for _, s := range w.Sites() {
		for i := range min(s.Pages, 20) {
			body, ok := w.RenderPage(s, i, 8080, now)
			if !ok {
				continue
			}
			u, _ := url.Parse(s.URL(8080))
			out = append(out, &Response{URL: u, Status: 200, Body: body, Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}}})
		}
	}
	return out
}

// corpusPages returns the pages of the real corpus (crawl/internal/corpus),
// nil if it is not fetched.
func corpusPages(b *testing.B) []*Response {
	b.Helper()
	dir, err := corpus.Dir(b.Context(), structured.SchemaContext())
	if errors.Is(err, corpus.ErrNotFetched) || errors.Is(err, corpus.ErrNoTools) {
		b.Logf("corpus set left out: %v", err)
		return nil
	}
	if err != nil {
		b.Fatal(err)
	}
	pages, err := corpus.Pages(dir)
	if err != nil {
		b.Fatal(err)
	}
	var out []*Response
	for _, p := range pages {
		u, _ := url.Parse(p.URL())
		out = append(out, &Response{URL: u, Status: 200, Body: p.HTML, Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}}})
	}
	return out
}

// BenchmarkProcessPage measures what a processor does with a fetched page
// (detect, parse, keywords, SimHash, the transform of structured data,
// the change digest, the record's encoding) with the transform off and
// on, over the emulated Internet's pages (30 % of its sites publish
// structured data), over pages that all carry some and, when it is
// fetched (crawl/internal/corpus), over the real corpus's 60 pages. It
// reports the result ratio: page bytes per compressed record byte
// (docs/structured-data.md).
func BenchmarkProcessPage(b *testing.B) {
	for _, set := range []struct {
		name       string
		structured float64
	}{{"world", 0.3}, {"all-structured", 1}, {"corpus", -1}} {
		var pages []*Response
		if set.structured >= 0 {
			pages = benchPages(b, set.structured)
		} else if pages = corpusPages(b); pages == nil {
			continue
		}
		for _, on := range []bool{false, true} {
			name := set.name + "/transform=off"
			if on {
				name = set.name + "/transform=on"
			}
			b.Run(name, func(b *testing.B) {
				cfg := defaults()
				cfg.structured = on
				c := &Crawler{cfg: cfg}
				kw := textproc.NewBuilder()
				var pageBytes, stmts int64
				var recs []Record
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					res := pages[i%len(pages)]
					r := processBench(c, res, kw)
					if i < len(pages) {
						recs = append(recs, *r)
						pageBytes += int64(len(res.Body))
						stmts += int64(len(r.Statements))
					}
					i++
				}
				b.SetBytes(pageBytes / int64(max(len(recs), 1)))
				if len(recs) == len(pages) {
					var compressed int64
					for k := 0; k < len(recs); k += 256 {
						batch, err := EncodeBatch(recs[k:min(k+256, len(recs))])
						if err != nil {
							b.Fatal(err)
						}
						compressed += int64(len(batch.Data))
					}
					b.ReportMetric(float64(pageBytes)/float64(compressed), "page/record")
					b.ReportMetric(float64(stmts)/float64(len(recs)), "stmts/page")
				}
			})
		}
	}
}

// processBench does process's CPU work for a 2xx page, without the
// frontier's transaction.
func processBench(c *Crawler, res *Response, kw *textproc.Builder) *Record {
	a := c.analyse(res, kw)
	r := &Record{URL: res.URL.String(), FinalURL: res.URL.String(), Status: 200, Change: ChangeNew, Size: a.size}
	_ = c.fill(r, a, kw)
	_ = appendRecord(nil, r)
	return r
}

// BenchmarkTransformCost processes each page with the transform off and
// then on, alternately, and reports the time of each and how much slower
// the transform makes a page. On a machine shared with other jobs the
// two runs of BenchmarkProcessPage see different loads; alternating page
// by page, both see the same.
func BenchmarkTransformCost(b *testing.B) {
	for _, set := range []struct {
		name       string
		structured float64
	}{{"world", 0.3}, {"all-structured", 1}, {"corpus", -1}} {
		var pages []*Response
		if set.structured >= 0 {
			pages = benchPages(b, set.structured)
		} else if pages = corpusPages(b); pages == nil {
			continue
		}
		b.Run(set.name, func(b *testing.B) {
			var crawlers [2]*Crawler
			for i, on := range []bool{false, true} {
				cfg := defaults()
				cfg.structured = on
				crawlers[i] = &Crawler{cfg: cfg}
			}
			kw := textproc.NewBuilder()
			var spent [2]time.Duration
			i := 0
			for b.Loop() {
				res := pages[i%len(pages)]
				for k, c := range crawlers {
					start := time.Now()
					processBench(c, res, kw)
					spent[k] += time.Since(start)
				}
				i++
			}
			b.ReportMetric(float64(spent[0].Microseconds())/float64(i), "µs-off/page")
			b.ReportMetric(float64(spent[1].Microseconds())/float64(i), "µs-on/page")
			b.ReportMetric(100*(float64(spent[1])/float64(spent[0])-1), "%slower")
		})
	}
}
