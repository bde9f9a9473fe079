package crawl

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func sampleRecords() []Record {
	now := time.Unix(1732270000, 123456000)
	return []Record{
		{
			URL: "http://a.org/x", FinalURL: "http://a.org/y", Time: now, Status: 200, Type: TypeHTML,
			Title: "Title ü", Lang: "en", Canonical: "http://a.org/y",
			Keywords:    []Keyword{{"cyprus", 65535}, {"volcano", 5 * 257}}, // weights travel quantised to multiples of 257
			Links:       []Link{{"http://a.org/z", "anchor"}, {"http://b.org/", ""}},
			Fingerprint: 0xdeadbeefcafef00d, Change: ChangeNew,
			Timing: FetchTiming{DNS: time.Millisecond, Connect: 2 * time.Millisecond, TTFB: 30 * time.Millisecond, Total: 40 * time.Millisecond},
			Size:   12345, Truncated: true, Owners: []string{"alice"},
		},
		{URL: "http://a.org/gone", FinalURL: "http://a.org/gone", Time: now, Status: 404, Change: ChangeGone},
		{
			URL: "http://a.org/event", FinalURL: "http://a.org/event", Time: now, Status: 200, Type: TypeHTML, Change: ChangeModified,
			Keywords: []Keyword{{"jazz", 65535}},
			Statements: []Statement{
				{Term{Kind: TermBlank, Value: "b0"}, Term{Kind: TermIRI, Value: rdfType}, Term{Kind: TermIRI, Value: SchemaOrg + "Event"}},
				{Term{Kind: TermBlank, Value: "b0"}, Term{Kind: TermIRI, Value: SchemaOrg + "name"}, Term{Kind: TermLiteral, Value: "Jazz", Lang: "en"}},
				{Term{Kind: TermBlank, Value: "b0"}, Term{Kind: TermIRI, Value: SchemaOrg + "url"}, Term{Kind: TermIRI, Value: "http://a.org/event"}},
				{Term{Kind: TermIRI, Value: "http://a.org/event"}, Term{Kind: TermIRI, Value: SchemaOrg + "startDate"}, Term{Kind: TermLiteral, Value: "2025-07-21", Datatype: xsd + "date"}},
				{Term{Kind: TermIRI, Value: "http://a.org/event"}, Term{Kind: TermIRI, Value: SchemaOrg + "description"}, Term{Kind: TermLiteral, Value: ""}},
			},
		},
	}
}

const (
	rdfType = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
	xsd     = "http://www.w3.org/2001/XMLSchema#"
)

func TestBatchRoundTrip(t *testing.T) {
	recs := sampleRecords()
	b, err := EncodeBatch(recs)
	if err != nil {
		t.Fatal(err)
	}
	if b.Records != len(recs) || !b.Oldest.Equal(recs[0].Time) {
		t.Fatalf("batch %+v", b)
	}
	got, err := DecodeBatch(b.Data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Time = recs[i].Time.Round(0)
		got[i].Time = got[i].Time.Round(0)
		if !got[i].Time.Equal(recs[i].Time) {
			t.Fatalf("time %v != %v", got[i].Time, recs[i].Time)
		}
		got[i].Time = recs[i].Time
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, recs)
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	good, _ := EncodeBatch(sampleRecords())
	tests := []struct {
		name string
		data []byte
		err  error
	}{
		{"empty", nil, ErrBatchCorrupt},
		{"magic", []byte("XXXX\x01\x01\x00\x00"), ErrBatchCorrupt},
		{"version", append([]byte("MCRB\x02"), good.Data[5:]...), ErrBatchVersion},
		{"flags", append([]byte("MCRB\x01\x80"), good.Data[6:]...), ErrBatchCorrupt},
		{"truncated", good.Data[:len(good.Data)-3], ErrBatchCorrupt},
		{"huge count", []byte("MCRB\x01\x00\xff\xff\xff\xff\x0f\x00"), ErrBatchCorrupt},
		{"length mismatch", []byte("MCRB\x01\x00\x01\x05abc"), ErrBatchCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeBatch(tt.data); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func FuzzDecodeBatch(f *testing.F) {
	good, _ := EncodeBatch(sampleRecords())
	f.Add(good.Data)
	raw := appendRecord(nil, &sampleRecords()[0])
	f.Add(append([]byte("MCRB\x01\x00\x01"), append(appendUvarint(nil, uint64(len(raw)+2)), append(appendUvarint(nil, uint64(len(raw))), raw...)...)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := DecodeBatch(data)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same records.
		b, err := EncodeBatch(recs)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		again, err := DecodeBatch(b.Data)
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-decoding: %v", err)
		}
	})
}

func FuzzStoredValues(f *testing.F) {
	e := entry{URL: "http://a/", Parent: "http://b/", Depth: 3, Hops: 1, Owners: []string{"o"}, Attempts: 1, Revisit: true, Added: time.Unix(5, 0)}
	p := pageState{URL: "http://a/", Queued: []byte("k"), Inlinks: 4, ETag: `"x"`, Visits: 2, Interval: time.Hour, NextVisit: time.Unix(9, 0)}
	m := &meter{loc: time.UTC, day: "2024-01-01", dayBytes: 77}
	f.Add(e.encode())
	er := e
	er.Record = true
	f.Add(er.encode())
	f.Add(p.encode())
	f.Add(m.state())
	f.Add(encodeRobots(&robotsItem{kind: robotsParsed, body: []byte("User-agent: *\nDisallow: /")}))
	f.Add(hostValue(time.Unix(7, 0), time.Unix(5, 0), true))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ready, base, leased, ok := parseHostValue(b); ok {
			if !bytes.Equal(hostValue(ready, base, leased), b) && b[0]&0x80 == 0 && (len(b) == 8 || b[8]&0x80 == 0) {
				t.Fatalf("host value %x re-encodes as %x", b, hostValue(ready, base, leased))
			}
		}
		if e, err := decodeEntry(b); err == nil {
			if !bytes.Equal(e.encode(), b) && e.Added.IsZero() == (len(b) == 0) {
				// Non-canonical varints may decode; re-encoding must still decode.
				if _, err := decodeEntry(e.encode()); err != nil {
					t.Fatalf("entry re-decode: %v", err)
				}
			}
		}
		if p, err := decodePageState(b); err == nil {
			if _, err := decodePageState(p.encode()); err != nil {
				t.Fatalf("page state re-decode: %v", err)
			}
		}
		_, _ = decodeRobots(b, "micra")
		_ = (&meter{loc: time.UTC}).restore(b)
	})
}

func TestStoredValuesRoundTrip(t *testing.T) {
	e := entry{URL: "http://a/", Parent: "http://b/", Depth: 3, Hops: 1, Owners: []string{"o"}, Attempts: 1, Revisit: true, Added: time.Unix(5, 0)}
	got, err := decodeEntry(e.encode())
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("entry: %+v %v", got, err)
	}
	p := pageState{URL: "http://a/", Queued: []byte("k"), Inlinks: 4, Depth: 2, Hops: 3, ETag: `"x"`, LastModified: "lm", BodyHash: 7, Digest: 8, Indexed: true, Visits: 2, Changes: 1, FirstVisit: time.Unix(1, 0), LastVisit: time.Unix(2, 0), Interval: time.Hour, NextVisit: time.Unix(9, 0)}
	gp, err := decodePageState(p.encode())
	if err != nil || !reflect.DeepEqual(gp, p) {
		t.Fatalf("page state: %+v %v", gp, err)
	}
	if _, err := decodeEntry(append(e.encode(), 0)); !errors.Is(err, ErrCorruptValue) {
		t.Fatalf("trailing byte accepted: %v", err)
	}
	// The record flag: a trailing byte, only when set.
	e.Record = true
	if got, err := decodeEntry(e.encode()); err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("entry with its record flag: %+v %v", got, err)
	}
	if _, err := decodeEntry(append(e.encode(), 1)); !errors.Is(err, ErrCorruptValue) {
		t.Fatalf("a byte after the record flag accepted: %v", err)
	}
}

func TestKeys(t *testing.T) {
	host := "example.com:8080"
	now := time.Unix(1700000000, 42)
	tm, h, err := parseReadyKey(readyKey(now, host))
	if err != nil || h != host || !tm.Equal(now) {
		t.Fatalf("ready key: %v %q %v", tm, h, err)
	}
	qh, prio, seq, err := parseQueueKey(queueKey(host, 0x1234, 99))
	if err != nil || qh != host || prio != 0x1234 || seq != 99 {
		t.Fatalf("queue key: %q %x %d %v", qh, prio, seq, err)
	}
	u := urlHash("http://a/")
	rt, ru, err := parseRevisitKey(revisitKey(now, u))
	if err != nil || ru != u || !rt.Equal(now) {
		t.Fatalf("revisit key: %v %v", rt, err)
	}
	for _, k := range [][]byte{readyKey(now, host), queueKey(host, 1, 2), revisitKey(now, u), urlKey(u), hostKey(host), robotsKey(host)} {
		if !bytes.HasPrefix(k, []byte(KeyPrefix)) {
			t.Fatalf("key %q outside the namespace", k)
		}
	}
	// Ready keys sort by time, queue keys by priority then sequence.
	if bytes.Compare(readyKey(now, "zzz"), readyKey(now.Add(time.Nanosecond), "aaa")) >= 0 {
		t.Fatal("ready keys not time-ordered")
	}
	if bytes.Compare(queueKey(host, 1, 500), queueKey(host, 2, 1)) >= 0 || bytes.Compare(queueKey(host, 1, 1), queueKey(host, 1, 2)) >= 0 {
		t.Fatal("queue keys misordered")
	}
}

// TestReversePrefixScan guards against badger #2108: a reverse scan of a
// prefix must start past the prefix's last key.
func TestReversePrefixScan(t *testing.T) {
	db := openMemDB(t)
	host := "a.org"
	err := db.Update(func(txn *badger.Txn) error {
		for i := range 5 {
			if err := txn.Set(queueKey(host, uint16(i), 1), []byte{byte(i)}); err != nil {
				return err
			}
		}
		return txn.Set(queueKey("b.org", 0, 1), []byte{9})
	})
	if err != nil {
		t.Fatal(err)
	}
	p := queuePrefix(host)
	var got []byte
	_ = db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Reverse = true
		opts.Prefix = p
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(append(bytes.Clone(p), 0xff)); it.ValidForPrefix(p); it.Next() {
			v, _ := it.Item().ValueCopy(nil)
			got = append(got, v...)
		}
		return nil
	})
	if !bytes.Equal(got, []byte{4, 3, 2, 1, 0}) {
		t.Fatalf("reverse scan = %v", got)
	}
}

func FuzzKeys(f *testing.F) {
	f.Add(readyKey(time.Unix(1, 0), "a.org"))
	f.Add(queueKey("a.org", 1, 2))
	f.Add(revisitKey(time.Unix(1, 0), urlHash("x")))
	f.Fuzz(func(t *testing.T, k []byte) {
		if tm, h, err := parseReadyKey(k); err == nil {
			if !bytes.Equal(readyKey(tm, h), k) && len(h) > 0 {
				// base32 accepts only canonical input without padding, so a
				// parsed key must rebuild to itself.
				t.Fatalf("ready key %q rebuilt as %q", k, readyKey(tm, h))
			}
		}
		if h, p, s, err := parseQueueKey(k); err == nil && !bytes.Equal(queueKey(h, p, s), k) {
			t.Fatalf("queue key %q rebuilt as %q", k, queueKey(h, p, s))
		}
		if tm, u, err := parseRevisitKey(k); err == nil && !bytes.Equal(revisitKey(tm, u), k) {
			t.Fatalf("revisit key %q rebuilt differently", k)
		}
	})
}
