package crawl

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/micra-net/micra/internal/codec"
)

func TestRecordCodec(t *testing.T) {
	for i, r := range sampleRecords() {
		b := AppendRecord([]byte("prefix"), &r)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("record %d: prefix lost", i)
		}
		got, err := DecodeRecord(b[len("prefix"):])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !got.Time.Equal(r.Time) {
			t.Fatalf("record %d: time %v != %v", i, got.Time, r.Time)
		}
		got.Time = r.Time
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, got, r)
		}
	}
	plain := sampleRecords()[0]
	plain.Keywords = nil
	good := AppendRecord(nil, &plain)
	withKw := AppendRecord(nil, &sampleRecords()[0])
	withStmts := AppendRecord(nil, &sampleRecords()[2])
	if good[0] != 1 || withKw[0] != 2 || withStmts[0] != 2 {
		t.Fatalf("versions %d, %d and %d, want 1 without keywords or statements and 2 with", good[0], withKw[0], withStmts[0])
	}
	// A version 2 record whose statements section is cut: the section
	// runs on past the record.
	cut := slices.Clone(withStmts[:len(withStmts)-3])
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, ErrBatchCorrupt},
		{"version", append([]byte{3}, good[1:]...), ErrBatchVersion},
		{"section truncated", cut, ErrBatchCorrupt},
		{"sections out of order", append(bytes.Clone(withStmts), 1, 0), ErrBatchCorrupt},
		{"bad statements", append(append([]byte{2}, good[1:]...), 1, 3, 0, 1, 0), ErrBatchCorrupt},
		{"bad string ref", append(append([]byte{2}, good[1:]...), 1, 7, 1, 1, 'x', 1, 1, 5, 0), ErrBatchCorrupt},
		{"literal subject", append(append([]byte{2}, good[1:]...), 1, 8, 1, 1, 'x', 1, 3, 0, 0, 1, 0), ErrBatchCorrupt},
		{"truncated", good[:len(good)-1], ErrBatchCorrupt},
		{"trailing", append(bytes.Clone(good), 0), ErrBatchCorrupt},
		{"oversized", make([]byte, MaxRecordBytes+1), ErrBatchCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeRecord(tt.b); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(AppendRecord(nil, &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		// The encoding is canonical after one round trip.
		once := AppendRecord(nil, &r)
		r2, err := DecodeRecord(once)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if twice := AppendRecord(nil, &r2); !bytes.Equal(once, twice) {
			t.Fatalf("encoding not canonical:\n%x\n%x", once, twice)
		}
	})
}

// TestRecordSections: a version 2 record with a section of a later version
// decodes, the section skipped; version 1 and 2 records without statements
// decode alike.
func TestRecordSections(t *testing.T) {
	r := sampleRecords()[2]
	b := AppendRecord(nil, &r)
	later := append(bytes.Clone(b), 9, 3, 'n', 'e', 'w')
	got, err := DecodeRecord(later)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Statements, r.Statements) {
		t.Fatalf("statements %v, want %v", got.Statements, r.Statements)
	}
	plain := sampleRecords()[0]
	plain.Keywords = nil
	v1 := AppendRecord(nil, &plain)
	v2 := append([]byte{2}, v1[1:]...)
	a, err1 := DecodeRecord(v1)
	c, err2 := DecodeRecord(v2)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(a, c) {
		t.Fatalf("v1 %v %v, v2 %v %v", a, err1, c, err2)
	}
}

// TestVocabulary: a page's whole vocabulary round-trips, weights quantised
// to multiples of 257 (within 128 of the original), each term once at its
// heaviest, heaviest level first and terms sorted within a level.
func TestVocabulary(t *testing.T) {
	r := sampleRecords()[0]
	r.Keywords = nil
	want := map[string]uint16{}
	for i := range 3000 {
		term := fmt.Sprintf("t%04d", (i*7919)%3000)
		w := uint16(65535 - i*21)
		r.Keywords = append(r.Keywords, Keyword{term, w})
		want[term] = w
	}
	r.Keywords = append(r.Keywords, Keyword{"t0000", 3}, Keyword{"", 9}) // a duplicate, lighter; an empty term
	got, err := DecodeRecord(AppendRecord(nil, &r))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Keywords) != len(want) {
		t.Fatalf("%d keywords, want %d", len(got.Keywords), len(want))
	}
	for i, k := range got.Keywords {
		w, ok := want[k.Term]
		if !ok || k.Weight%257 != 0 || max(k.Weight, w)-min(k.Weight, w) > 128 {
			t.Fatalf("keyword %q weight %d, sent %d (present %v)", k.Term, k.Weight, w, ok)
		}
		if i > 0 {
			p := got.Keywords[i-1]
			if p.Weight < k.Weight || p.Weight == k.Weight && p.Term >= k.Term {
				t.Fatalf("keyword %d %v after %v", i, k, p)
			}
		}
	}
	// Over maxRecKeywords distinct terms: the heaviest are kept.
	r.Keywords = nil
	for i := range maxRecKeywords + 10 {
		r.Keywords = append(r.Keywords, Keyword{fmt.Sprintf("w%05d", i), uint16(65535 - i*10)})
	}
	if got, err = DecodeRecord(AppendRecord(nil, &r)); err != nil || len(got.Keywords) != maxRecKeywords || got.Keywords[0].Term != "w00000" {
		t.Fatalf("%d keywords, first %v, err %v", len(got.Keywords), got.Keywords[0], err)
	}
}

// TestRecordExactKeywords: records written before the vocabulary section,
// whose keywords are version 1's list with exact weights, still decode,
// and so do version 2 records that have both.
func TestRecordExactKeywords(t *testing.T) {
	r := sampleRecords()[0]
	r.Keywords = []Keyword{{"cyprus", 65535}, {"volcano", 1200}}
	noKw := r
	noKw.Keywords = nil
	enc := AppendRecord(nil, &noKw)
	// The version 1 list is the empty count after the canonical URL: put
	// the keywords in its place.
	at := bytes.LastIndex(enc, append([]byte{byte(len(r.Canonical))}, r.Canonical...)) + 1 + len(r.Canonical)
	if enc[at] != 0 {
		t.Fatalf("no empty keyword list at %d", at)
	}
	e := codec.Encoder(slices.Clone(enc[:at]))
	e.Uvarint(2)
	e.Str("cyprus")
	e.Uvarint(65535)
	e.Str("volcano")
	e.Uvarint(1200)
	old := append(e, enc[at+1:]...)
	got, err := DecodeRecord(old)
	if err != nil || !reflect.DeepEqual(got.Keywords, r.Keywords) {
		t.Fatalf("keywords %v, err %v; want %v", got.Keywords, err, r.Keywords)
	}
	// Both lists: the exact ones first, then the section's.
	both := append([]byte{2}, old[1:]...)
	both = append(both, sectionVocabulary)
	v := appendVocabulary(nil, []Keyword{{"lava", 257}})
	both = append(appendUvarint(both, uint64(len(v))), v...)
	if got, err = DecodeRecord(both); err != nil || len(got.Keywords) != 3 || got.Keywords[2] != (Keyword{"lava", 257}) {
		t.Fatalf("keywords %v, err %v", got.Keywords, err)
	}
}

func TestVocabularyRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"levels increase":        {2, 5, 1, 0, 1, 'a', 6, 1, 0, 1, 'b'},
		"level zero":             {1, 0, 1, 0, 1, 'a'},
		"terms out of order":     {1, 5, 2, 0, 1, 'b', 0, 1, 'a'},
		"term repeated":          {1, 5, 2, 0, 1, 'a', 1, 0},
		"shares more than prior": {1, 5, 2, 0, 1, 'a', 2, 1, 'b'},
		"empty term":             {1, 5, 1, 0, 0},
		"count over input":       {1, 5, 200, 0, 1, 'a'},
		"trailing":               {1, 5, 1, 0, 1, 'a', 0},
	} {
		if _, err := decodeVocabulary(b, maxRecKeywords); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	if _, err := decodeVocabulary([]byte{1, 5, 2, 0, 1, 'a', 0, 1, 'b'}, 1); err == nil {
		t.Error("over the limit: decoded")
	}
}

func TestKeywordBudget(t *testing.T) {
	for _, c := range []struct {
		size        int64
		limit, want int
	}{
		{0, 4096, minKeywords},
		{5000, 4096, minKeywords},
		{20000, 4096, 200},
		{10 << 20, 4096, 4096},
		{20000, 50, 50}, // MaxKeywords below the budget
	} {
		if got := keywordBudget(c.size, c.limit); got != c.want {
			t.Errorf("keywordBudget(%d, %d) = %d, want %d", c.size, c.limit, got, c.want)
		}
	}
}
