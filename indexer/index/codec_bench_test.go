package index

import (
	"fmt"
	"testing"

	"github.com/micra-net/micra/crawl"
)

// BenchmarkDecodeValues decodes a page's state and its stored postings, the
// values a put reads for every record it replaces.
func BenchmarkDecodeValues(b *testing.B) {
	m := (&docMeta{Time: t0, Hash: 42, URL: "http://a.example/section/1/page.html", Prov: Provenance{Node: "12D3KooWAbCdEfGhIjKlMnOpQrStUvWxYz", Seq: 3, Received: t0}}).encode()
	s := stored{Record: crawl.AppendRecord(nil, &crawl.Record{URL: "http://a/"})}
	for i := range 200 {
		s.Postings = append(s.Postings, posting{Term: fmt.Sprintf("term%03d", i), Weight: uint16(65535 - 300*i), Flags: inKeyword})
	}
	sb := s.encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeDocMeta(m); err != nil {
			b.Fatal(err)
		}
		if _, err := decodeStored(sb); err != nil {
			b.Fatal(err)
		}
	}
}
