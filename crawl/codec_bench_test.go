package crawl

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// benchRecord is a record of the size a crawled article makes: a few
// hundred keywords, some dozens of links and a small block of statements.
func benchRecord() Record {
	r := sampleRecords()[2]
	r.Title = "A page about volcanoes, jazz and the history of Cyprus"
	for i := range 300 {
		r.Keywords = append(r.Keywords, Keyword{Term: fmt.Sprintf("term%03d", i), Weight: uint16(65535 - 200*i)})
	}
	for i := range 60 {
		r.Links = append(r.Links, Link{URL: fmt.Sprintf("http://a.org/section/%d/page-%d.html", i%7, i), Anchor: fmt.Sprintf("anchor text %d", i)})
	}
	r.Owners = []string{"12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdef"}
	return r
}

// BenchmarkDecodeRecord decodes one record as an indexer does for every
// record of a batch it stores.
func BenchmarkDecodeRecord(b *testing.B) {
	r := benchRecord()
	enc := AppendRecord(nil, &r)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRecord(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFrontierValues decodes a queue entry and a page state, the
// values the frontier reads on every lease and every visit.
func BenchmarkDecodeFrontierValues(b *testing.B) {
	now := time.Unix(1700000000, 0)
	e := (&entry{URL: "http://a.org/section/1/page.html", Parent: "http://a.org/", Depth: 3, Hops: 1, Owners: []string{"o"}, Attempts: 1, Added: now}).encode()
	p := (&pageState{URL: "http://a.org/section/1/page.html", Queued: []byte("queue-key-0123456789"), Inlinks: 4, ETag: `"abc"`, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT", Visits: 2, FirstVisit: now, LastVisit: now, Interval: time.Hour, NextVisit: now}).encode()
	b.ReportAllocs()
	for b.Loop() {
		_, errE := decodeEntry(e)
		_, errP := decodePageState(p)
		if err := errors.Join(errE, errP); err != nil {
			b.Fatal(err)
		}
	}
}
