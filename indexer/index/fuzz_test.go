package index

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func FuzzValues(f *testing.F) {
	m := docMeta{Gone: true, Time: t0, Hash: 42, URL: "http://a.example/", Prov: Provenance{Node: "n", Seq: 3, Received: t0}}
	s := stored{Postings: []posting{{Term: "alpha", Weight: 65535, Flags: inKeyword | inTitle}, {Term: "beta", Weight: 1, Flags: inHost}}, Record: crawl.AppendRecord(nil, &crawl.Record{URL: "http://a/"})}
	mt := match{Relevance: 0.5, Terms: []string{"alpha", "beta"}}
	pv := profileValue{Name: "p", Keywords: []ProfileKeyword{{"Java", 4}}, Threshold: 0.1, Updated: t0, State: profilePending}
	c := counts{Docs: 1, Tombstones: 2, Terms: 3, Postings: 4, Matches: 5, Added: 6, Rejected: 7, LastIngest: t0}
	for _, b := range [][]byte{m.encode(), s.encode(), mt.encode(), pv.encode(), c.encode(), encodePostingValue(7, inTitle, 0), encodePostingValue(0, 0, 300), encodeAnchorSample(), encodeUvarint(9), termState{df: 3, impact: true}.encode(),
		termState{df: 3000, gen: 2, delta: 17}.encode(), sampleBlock()} {
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
		if w, fl, a, err := decodePostingValue(b); err == nil && !bytes.Equal(encodePostingValue(w, fl, a), b) {
			t.Fatalf("posting value %x", b)
		}
		if v, err := decodeAnchorCounts(b); err == nil {
			if w, err := decodeAnchorCounts(v.encode()); err != nil || !maps.Equal(w, v) || !bytes.Equal(w.encode(), v.encode()) {
				t.Fatalf("anchor counts round trip: %v %v %v", v, w, err)
			}
		}
		if v, err := decodeTermState(b); err == nil {
			if w, err := decodeTermState(v.encode()); err != nil || w != v || v.df == 0 {
				t.Fatalf("term state round trip: %+v %+v %v", v, w, err)
			}
		}
		if v, err := decodeBlock(b); err == nil {
			var w blockWriter
			for i := range v.n {
				wt, fl, a := v.attr(i)
				w.add(v.id(i), wt, fl, a)
			}
			if u, err := decodeBlock(w.encode()); err != nil || !bytes.Equal(u.ids, v.ids) || !bytes.Equal(u.attrs, v.attrs) {
				t.Fatalf("block %x re-encoded as %x: %v", b, w.encode(), err)
			}
		}
		if v, err := decodeUvarint(b); err == nil && !bytes.Equal(encodeUvarint(v), b) && len(b) <= 10 {
			// Non-minimal varints decode; they must still be the same number.
			if w, _ := decodeUvarint(encodeUvarint(v)); w != v {
				t.Fatalf("uvarint %x", b)
			}
		}
	})
}

func sampleBlock() []byte {
	var w blockWriter
	w.add(idOf("http://a/"), 65535, inKeyword|inTitle, 0)
	w.add(idOf("http://b/"), 0, 0, 16384)
	return w.encode()
}

func encodeAnchorSample() []byte { return anchorCounts{"manual": 3, "widget": 1}.encode() }

func FuzzKeys(f *testing.F) {
	f.Add(postingKey("alpha", idOf("http://a/")))
	f.Add(impactKey("alpha", 1.25, idOf("http://a/")))
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
		if q, id, ok := parseImpactKey(impactPrefix("alpha"), k); ok && !bytes.Equal(impactKey("alpha", q, id), k) {
			t.Fatalf("impact key %q rebuilt as %q", k, impactKey("alpha", q, id))
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
				if !validTerm(term) && !validVerbatim(term) {
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

// FuzzNTriples writes statements of arbitrary terms as the N-Triples
// export does: a statement cleanStatements keeps is always written, as
// one line that reads back (by a strict reader of the N-Triples grammar's
// subset the exporter uses) to the same terms; one it drops is never.
func FuzzNTriples(f *testing.F) {
	f.Add("https://a.example/s", "https://schema.org/name", "Garlic \"soup\"\n\\", "", "fr", uint8(2))
	f.Add("b0", "https://schema.org/p", "https://x.example/o", "", "", uint8(0))
	f.Add("https://例え.example/", "urn:x:y", "1", "http://www.w3.org/2001/XMLSchema#int", "", uint8(2))
	f.Add("rel", "a b", "\x00\xff\u2028", "x", "en_GB", uint8(2))
	f.Fuzz(func(t *testing.T, s, p, o, dt, lang string, kinds uint8) {
		sk, ok := crawl.TermKind(kinds&1), crawl.TermKind(kinds>>1&3)
		if kinds&1 == 0 {
			sk = crawl.TermIRI
		} else {
			sk = crawl.TermBlank
		}
		in := crawl.Statement{S: crawl.Term{Kind: sk, Value: s}, P: crawl.Term{Kind: crawl.TermIRI, Value: p},
			O: crawl.Term{Kind: ok, Value: o, Datatype: dt, Lang: lang}}
		kept, _ := cleanStatements([]crawl.Statement{in}, 10)
		line, written := appendNTriple(nil, in, docID{1, 2}, map[string]int{})
		if written != (len(kept) == 1) {
			t.Fatalf("%+v: kept %v, written %v", in, len(kept) == 1, written)
		}
		if !written {
			return
		}
		got, err := readNTriple(string(line))
		if err != nil {
			t.Fatalf("%+v: %q: %v", in, line, err)
		}
		want := kept[0]
		if want.S.Kind == crawl.TermBlank {
			want.S.Value = "p0102000000000000b0"
		}
		if want.O.Kind == crawl.TermBlank {
			want.O.Value = "p0102000000000000b0"
			if want.S.Kind != crawl.TermBlank || kept[0].S.Value != kept[0].O.Value {
				want.O.Value = "p0102000000000000b" + map[bool]string{true: "1", false: "0"}[want.S.Kind == crawl.TermBlank]
			}
		}
		if want.O.Kind == crawl.TermLiteral {
			want.O.Value = strings.ToValidUTF8(want.O.Value, "\uFFFD")
		}
		if got != want {
			t.Fatalf("%q read back as %+v, want %+v", line, got, want)
		}
	})
}

// readNTriple reads one line of the exporter's N-Triples.
func readNTriple(line string) (crawl.Statement, error) {
	var terms [3]crawl.Term
	rest, ok := strings.CutSuffix(line, " .\n")
	if !ok || strings.ContainsAny(rest, "\n\r") {
		return crawl.Statement{}, fmt.Errorf("line end")
	}
	for i := range terms {
		if i > 0 {
			if !strings.HasPrefix(rest, " ") {
				return crawl.Statement{}, fmt.Errorf("no space before term %d", i)
			}
			rest = rest[1:]
		}
		var err error
		terms[i], rest, err = readNTTerm(rest)
		if err != nil {
			return crawl.Statement{}, fmt.Errorf("term %d: %w", i, err)
		}
	}
	if rest != "" {
		return crawl.Statement{}, fmt.Errorf("trailing %q", rest)
	}
	return crawl.Statement{S: terms[0], P: terms[1], O: terms[2]}, nil
}

func readNTTerm(s string) (crawl.Term, string, error) {
	switch {
	case strings.HasPrefix(s, "<"):
		end := strings.IndexByte(s, '>')
		if end < 0 || !validIRI(s[1:end]) {
			return crawl.Term{}, "", fmt.Errorf("IRI %q", s)
		}
		return crawl.Term{Kind: crawl.TermIRI, Value: s[1:end]}, s[end+1:], nil
	case strings.HasPrefix(s, "_:"):
		end := strings.IndexByte(s, ' ')
		if end < 0 {
			end = len(s)
		}
		return crawl.Term{Kind: crawl.TermBlank, Value: s[2:end]}, s[end:], nil
	case strings.HasPrefix(s, `"`):
		var b strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			c := s[i]
			if c < 0x20 || c == 0x7f {
				return crawl.Term{}, "", fmt.Errorf("raw control %#x", c)
			}
			if c != '\\' {
				b.WriteByte(c)
				continue
			}
			i++
			if i == len(s) {
				return crawl.Term{}, "", fmt.Errorf("escape at the end")
			}
			switch s[i] {
			case 't', 'b', 'n', 'r', 'f', '"', '\\':
				b.WriteByte(map[byte]byte{'t': '\t', 'b': '\b', 'n': '\n', 'r': '\r', 'f': '\f', '"': '"', '\\': '\\'}[s[i]])
			case 'u':
				if i+4 >= len(s) {
					return crawl.Term{}, "", fmt.Errorf("short \\u")
				}
				var r rune
				if _, err := fmt.Sscanf(s[i+1:i+5], "%04X", &r); err != nil {
					return crawl.Term{}, "", err
				}
				b.WriteRune(r)
				i += 4
			default:
				return crawl.Term{}, "", fmt.Errorf("escape \\%c", s[i])
			}
		}
		if i == len(s) {
			return crawl.Term{}, "", fmt.Errorf("unterminated literal")
		}
		t := crawl.Term{Kind: crawl.TermLiteral, Value: b.String()}
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "@"):
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			t.Lang, rest = rest[1:end], rest[end:]
			if !validLang(t.Lang) {
				return crawl.Term{}, "", fmt.Errorf("tag %q", t.Lang)
			}
		case strings.HasPrefix(rest, "^^<"):
			end := strings.IndexByte(rest, '>')
			if end < 0 || !validIRI(rest[3:end]) {
				return crawl.Term{}, "", fmt.Errorf("datatype %q", rest)
			}
			t.Datatype, rest = rest[3:end], rest[end+1:]
		}
		return t, rest, nil
	}
	return crawl.Term{}, "", fmt.Errorf("term %q", s)
}
