package index

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func FuzzValues(f *testing.F) {
	m := docMeta{Gone: true, Time: t0, Hash: 42, URL: "http://a.example/", Prov: Provenance{Node: "n", Seq: 3, Received: t0}}
	s := stored{Postings: []posting{{"alpha", 65535, inKeyword | inTitle}, {"beta", 1, inHost}}, Record: crawl.AppendRecord(nil, &crawl.Record{URL: "http://a/"})}
	mt := match{Relevance: 0.5, Terms: []string{"alpha", "beta"}}
	pv := profileValue{Name: "p", Keywords: []ProfileKeyword{{"Java", 4}}, Threshold: 0.1, Updated: t0, State: profilePending}
	c := counts{Docs: 1, Tombstones: 2, Terms: 3, Postings: 4, Matches: 5, Added: 6, Rejected: 7, LastIngest: t0}
	for _, b := range [][]byte{m.encode(), s.encode(), mt.encode(), pv.encode(), c.encode(), encodePostingValue(7, inTitle), encodeUvarint(9)} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever decodes re-encodes to something that decodes equal.
		if v, err := decodeDocMeta(b); err == nil {
			if w, err := decodeDocMeta(v.encode()); err != nil || w.URL != v.URL || w.Hash != v.Hash || !w.Time.Equal(v.Time) || w.Prov.Node != v.Prov.Node {
				t.Fatalf("doc meta round trip: %+v %+v %v", v, w, err)
			}
		}
		if v, err := decodeStored(b); err == nil {
			w, err := decodeStored(v.encode())
			if err != nil || !slices.Equal(w.Postings, v.Postings) || !bytes.Equal(w.Record, v.Record) {
				t.Fatalf("stored round trip: %v", err)
			}
		}
		if v, err := decodeMatch(b); err == nil {
			if w, err := decodeMatch(v.encode()); err != nil || w.Relevance != v.Relevance || !slices.Equal(w.Terms, v.Terms) {
				t.Fatalf("match round trip: %v", err)
			}
		}
		if v, err := decodeProfileValue(b); err == nil {
			if w, err := decodeProfileValue(v.encode()); err != nil || w.Name != v.Name || !slices.Equal(w.Keywords, v.Keywords) {
				t.Fatalf("profile round trip: %v", err)
			}
		}
		if v, err := decodeCounts(b); err == nil {
			if w, err := decodeCounts(v.encode()); err != nil || w.Docs != v.Docs || w.Rejected != v.Rejected {
				t.Fatalf("counts round trip: %v", err)
			}
		}
		if w, fl, err := decodePostingValue(b); err == nil && !bytes.Equal(encodePostingValue(w, fl), b) {
			t.Fatalf("posting value %x", b)
		}
		if v, err := decodeUvarint(b); err == nil && !bytes.Equal(encodeUvarint(v), b) && len(b) <= 10 {
			// Non-minimal varints decode; they must still be the same number.
			if w, _ := decodeUvarint(encodeUvarint(v)); w != v {
				t.Fatalf("uvarint %x", b)
			}
		}
	})
}

func FuzzKeys(f *testing.F) {
	f.Add(postingKey("alpha", idOf("http://a/")))
	f.Add(matchRankKey("p", 0.25, idOf("http://a/")))
	f.Add(matchKey("p", idOf("http://a/")))
	f.Add(recordKey(idOf("http://a/")))
	f.Fuzz(func(t *testing.T, k []byte) {
		if name, id, ok := parseMatchKey(k); ok && !bytes.Equal(matchKey(name, id), k) {
			t.Fatalf("match key %q rebuilt as %q", k, matchKey(name, id))
		}
		if id, ok := parseIDKey(prefixRecord, k); ok && !bytes.Equal(recordKey(id), k) {
			t.Fatalf("record key %q rebuilt as %q", k, recordKey(id))
		}
		if term, id, ok := parsePostingKey(k); ok && !bytes.Equal(postingKey(term, id), k) {
			t.Fatalf("posting key %q rebuilt as %q", k, postingKey(term, id))
		}
		if len(k) > 1 {
			name := string(k[:min(len(k), int(k[0]))])
			prefix := matchRankPrefix(name)
			if rel, id, ok := parseMatchRankKey(prefix, append(prefix, k...)); ok && !bytes.Equal(matchRankKey(name, rel, id), append(prefix, k...)) {
				t.Fatalf("rank key %q rebuilt differently", k)
			}
		}
	})
}

func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"volcano", "Running DOGS -cats", "e-mail +x", "the of", "-a -b", "café ΑΘΗΝΑ 東京", "\xff\xfe", "a\u2019b", "--x ++y -",
		"type:Recipe garlic", "-type:schema:Event x", "type:<https://schema.org/Recipe>", `author="alice smith"`, "schema:price=10",
		"<https://schema.org/author>=bob", "type:", "=x", "x=", `a="b`, "rdf:type=Event", "availability=schema:InStock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := parseQuery(s, 256, 8)
		if err != nil {
			if !errors.Is(err, ErrBadQuery) {
				t.Fatalf("error %v is not ErrBadQuery", err)
			}
			return
		}
		if len(q.Terms) == 0 || len(q.Terms)+len(q.Excluded) > 8 || len(s) > 256 {
			t.Fatalf("%q gave %+v", s, q)
		}
		for _, l := range [][]string{q.Terms, q.Excluded} {
			if !slices.IsSorted(l) || len(slices.Compact(slices.Clone(l))) != len(l) {
				t.Fatalf("%q: terms not sorted and distinct: %q", s, l)
			}
			for _, term := range l {
				if isHidden(term) {
					if len(term) > maxHiddenTermBytes || !(strings.HasPrefix(term, "#t:") || strings.HasPrefix(term, "#p:") || strings.HasPrefix(term, "#h:")) {
						t.Fatalf("%q: hidden term %q could never be stored", s, term)
					}
					continue
				}
				if !validTerm(term) {
					t.Fatalf("%q: term %q could never be stored", s, term)
				}
			}
		}
		for _, term := range q.Excluded {
			if slices.Contains(q.Terms, term) {
				t.Fatalf("%q: %q both searched and excluded", s, term)
			}
		}
	})
}

// FuzzPutBatch feeds arbitrary batches to one index: whatever decodes is
// stored or rejected, never breaks the index's invariants, and can be
// searched.
func FuzzPutBatch(f *testing.F) {
	recs := corpus(3, 1)
	recs = append(recs, gone(recs[0].URL, t0.Add(time.Hour)), page("http://x.example/", "T", t0, "Bad Term", 5, "ok", 9))
	b, _ := crawl.EncodeBatch(recs)
	f.Add(b.Data)
	x := newTestIndex(f, nil)
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := x.PutBatch(t.Context(), src, data)
		if err != nil {
			if !errors.Is(err, crawl.ErrBatchCorrupt) && !errors.Is(err, crawl.ErrBatchVersion) {
				t.Fatalf("put: %v", err)
			}
			return
		}
		for _, e := range res.Errors {
			if !errors.Is(e, ErrInvalidRecord) {
				t.Fatalf("rejection %v", e)
			}
		}
		if n++; n%16 == 0 {
			if err := x.Verify(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := x.Search(t.Context(), Query{Text: "ok", Any: true}); err != nil {
			t.Fatal(err)
		}
	})
}
