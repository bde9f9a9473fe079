// Command colly is the colly v2 side of the crawler comparison: it crawls one site
// from a start URL and prints a benchutil.Result. See ../main.go.
package main

import (
	"log"

	"github.com/micra-net/micra/bench/internal/benchutil"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"
)

func crawlColly(cc benchutil.Config) (benchutil.Result, error) {
	start, err := url.Parse(cc.Start)
	if err != nil {
		return benchutil.Result{}, err
	}
	c := colly.NewCollector(
		colly.AllowedDomains(start.Hostname()),
		colly.Async(true),
		colly.UserAgent("colly-bench"),
	)
	if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: cc.Concurrency}); err != nil {
		return benchutil.Result{}, err
	}
	// Keep as many idle connections as requests in flight, as micra does;
	// Go's default transport keeps two per host.
	c.WithTransport(&http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        100,
		MaxIdleConnsPerHost: cc.Concurrency,
		IdleConnTimeout:     30 * time.Second,
	})
	var pages, body atomic.Int64
	var mu sync.Mutex
	var urls []string
	c.OnResponse(func(r *colly.Response) {
		pages.Add(1)
		body.Add(int64(len(r.Body)))
		mu.Lock()
		urls = append(urls, r.Request.URL.String())
		mu.Unlock()
	})
	c.OnError(func(r *colly.Response, _ error) {
		if r.StatusCode != 0 {
			pages.Add(1)
		}
	})
	c.OnHTML("a[href]", func(e *colly.HTMLElement) {
		// colly's visited test keys on the URL with its fragment, so
		// page.html#a and page.html#b would be fetched twice: drop it.
		link := e.Request.AbsoluteURL(e.Attr("href"))
		if i := strings.IndexByte(link, '#'); i >= 0 {
			link = link[:i]
		}
		e.Request.Visit(link)
	})
	stopProf, err := benchutil.StartProfile(cc.Profile)
	if err != nil {
		return benchutil.Result{}, err
	}
	t0 := time.Now()
	if err := c.Visit(cc.Start); err != nil {
		return benchutil.Result{}, err
	}
	c.Wait()
	elapsed := time.Since(t0)
	stopProf()
	// colly's visited test is not atomic in async mode: a URL found on two
	// pages at once may be fetched twice. Pages counts distinct pages.
	distinct := map[string]bool{}
	for _, u := range urls {
		distinct[u] = true
	}
	r := benchutil.Result{Crawler: "colly", Pages: pages.Load() - int64(len(urls)-len(distinct)), Repeats: int64(len(urls) - len(distinct)),
		Seconds: elapsed.Seconds(), PeakRSS: benchutil.PeakRSS(), RSSDetail: benchutil.RSSDetail(),
		BodyBytes: body.Load(), WireBytes: body.Load()}
	urls = urls[:0]
	for u := range distinct {
		urls = append(urls, u)
	}
	return r, benchutil.WriteURLs(cc.URLsFile, urls)
}

func main() {
	log.SetFlags(0)
	if err := benchutil.Main(crawlColly); err != nil {
		log.Fatal(err)
	}
}
