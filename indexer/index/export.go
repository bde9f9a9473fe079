package index

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/kv"
)

// JSONRecord is the JSON form of a stored record, used by Export (one per
// line) and by the HTTP API. Field names are stable; fields are added, never
// renamed or removed. Every field is always present; lists may be empty but
// are never null.
type JSONRecord struct {
	URL         string          `json:"url"`         // the URL requested, the page's identity
	FinalURL    string          `json:"final_url"`   // after redirects
	Time        time.Time       `json:"time"`        // when the page was crawled (RFC 3339)
	Status      int             `json:"status"`      // HTTP status
	Type        string          `json:"type"`        // html, xhtml, rss, atom, rdf, sitemap, sitemapindex, text, other
	Title       string          `json:"title"`       //
	Lang        string          `json:"lang"`        // declared language, may be empty
	Canonical   string          `json:"canonical"`   // rel=canonical, may be empty
	Keywords    []JSONKeyword   `json:"keywords"`    // heaviest first
	Links       []JSONLink      `json:"links"`       // out-links in page order
	Fingerprint string          `json:"fingerprint"` // 64-bit SimHash, 16 hex digits
	Change      string          `json:"change"`      // new, modified or gone
	Timing      JSONTiming      `json:"timing"`      // fetch timing in microseconds
	Size        int64           `json:"size"`        // decoded body bytes
	Truncated   bool            `json:"truncated"`   // the body hit a size cap
	Owners      []string        `json:"owners"`      // who requested the crawl (WebRACE)
	Provenance  JSONProvenance  `json:"provenance"`
	Distrusted  bool            `json:"distrusted,omitempty"` // the node that delivered it is distrusted (Index.Distrust)
	Statements  []JSONStatement `json:"statements"`           // the page's structured data (RDF triples), in the crawler's order
}

// JSONStatement is an RDF triple of a page's structured data.
type JSONStatement struct {
	Subject   JSONTerm `json:"s"`
	Predicate JSONTerm `json:"p"`
	Object    JSONTerm `json:"o"`
}

// JSONTerm is a node of a statement: kind "iri" (value: an absolute IRI),
// "blank" (value: its label, unique within the record) or "literal"
// (value: its lexical form; datatype an IRI, absent for plain strings;
// lang a language tag).
type JSONTerm struct {
	Kind     string `json:"kind"`
	Value    string `json:"value"`
	Datatype string `json:"datatype,omitempty"`
	Lang     string `json:"lang,omitempty"`
}

func toJSONTerm(t crawl.Term) JSONTerm {
	j := JSONTerm{Value: t.Value, Datatype: t.Datatype, Lang: t.Lang}
	switch t.Kind {
	case crawl.TermIRI:
		j.Kind = "iri"
	case crawl.TermBlank:
		j.Kind = "blank"
	default:
		j.Kind = "literal"
	}
	return j
}

// ToJSONStatements converts statements to their JSON form; never nil.
func ToJSONStatements(stmts []crawl.Statement) []JSONStatement {
	out := make([]JSONStatement, len(stmts))
	for i, s := range stmts {
		out[i] = JSONStatement{Subject: toJSONTerm(s.S), Predicate: toJSONTerm(s.P), Object: toJSONTerm(s.O)}
	}
	return out
}

// JSONKeyword is a keyword: a Snowball stem and its weight, 1..65535.
type JSONKeyword struct {
	Term   string `json:"term"`
	Weight uint16 `json:"weight"`
}

// JSONLink is an out-link with its anchor text.
type JSONLink struct {
	URL    string `json:"url"`
	Anchor string `json:"anchor"`
}

// JSONTiming is the timing of the fetch, in microseconds.
type JSONTiming struct {
	DNS     int64 `json:"dns_us"`
	Connect int64 `json:"connect_us"`
	TTFB    int64 `json:"ttfb_us"`
	Total   int64 `json:"total_us"`
}

// JSONProvenance says who delivered the record and when.
type JSONProvenance struct {
	Node     string    `json:"node"`
	Seq      uint64    `json:"seq"`
	Received time.Time `json:"received"`
}

// ToJSON converts a stored document to its JSON form.
func ToJSON(d *Doc) JSONRecord {
	r := &d.Record
	j := JSONRecord{
		URL: r.URL, FinalURL: r.FinalURL, Time: r.Time.UTC(), Status: r.Status, Type: r.Type.String(),
		Title: r.Title, Lang: r.Lang, Canonical: r.Canonical,
		Keywords: make([]JSONKeyword, len(r.Keywords)), Links: make([]JSONLink, len(r.Links)),
		Fingerprint: fmt.Sprintf("%016x", r.Fingerprint), Change: r.Change.String(),
		Timing: JSONTiming{
			DNS: r.Timing.DNS.Microseconds(), Connect: r.Timing.Connect.Microseconds(),
			TTFB: r.Timing.TTFB.Microseconds(), Total: r.Timing.Total.Microseconds(),
		},
		Size: r.Size, Truncated: r.Truncated, Owners: append([]string{}, r.Owners...),
		Provenance: JSONProvenance{Node: d.Provenance.Node, Seq: d.Provenance.Seq, Received: d.Provenance.Received.UTC()},
		Distrusted: d.Distrusted, Statements: ToJSONStatements(r.Statements),
	}
	for i, k := range r.Keywords {
		j.Keywords[i] = JSONKeyword(k)
	}
	for i, l := range r.Links {
		j.Links[i] = JSONLink(l)
	}
	return j
}

// Export writes every searchable record, with its provenance, to w as JSON
// Lines (one JSONRecord per line, in id order) from one consistent
// snapshot, and returns how many it wrote. It streams: memory does not grow
// with the index. It stops when ctx ends.
func (x *Index) Export(ctx context.Context, w io.Writer) (int, error) { return exportJSONL(ctx, x, w) }

// exportJSONL is Export of either store.
func exportJSONL(ctx context.Context, s Store, w io.Writer) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	n := 0
	err := s.eachRecord(ctx, func(_ docID, d *Doc) error {
		if err := enc.Encode(ToJSON(d)); err != nil {
			return err
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// eachRecord calls f with every searchable record, in id order, from one
// snapshot.
func (x *Index) eachRecord(ctx context.Context, f func(docID, *Doc) error) error {
	return x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 16, Prefix: prefixRecord})
		defer it.Close()
		for it.Seek(prefixRecord); it.ValidForPrefix(prefixRecord); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			id, ok := parseIDKey(prefixRecord, it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: record key %q", ErrCorruptValue, it.Item().Key())
			}
			var d Doc
			var err error
			d.Record, err = kv.Value(it.Item(), decodeStoredRecord)
			if err != nil {
				return fmt.Errorf("record %x: %w", id, err)
			}
			m, ok, err := getMeta(txn, id)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%w: record %x without state", ErrCorruptValue, id)
			}
			d.Provenance = m.Prov
			d.Distrusted = x.trust.distrusts(m.Prov.Node)
			if err := f(id, &d); err != nil {
				return err
			}
		}
		return nil
	})
}
