package index

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// TestAnchors: a page is found by the words of the links to it, not by
// the words of its own links; one linking page counts once; a link to
// itself describes nothing; a replaced or removed linking page takes its
// anchors back; the order records arrive in does not matter.
func TestAnchors(t *testing.T) {
	x := newTestIndex(t, nil)
	mustPut(t, x, linkedPages()...)
	checkInvariants(t, x)
	// "frobnicate" is on no page, only on the links to the API page.
	if got := searchAll(t, x, "frobnicate"); !slices.Equal(got, []string{"http://docs.example/api"}) {
		t.Errorf("frobnicate: %q", got)
	}
	// "configuration" is only an anchor of the home page's link to the
	// settings: it finds the settings, not the home page.
	if got := searchAll(t, x, "configuration"); !slices.Equal(got, []string{"http://docs.example/config"}) {
		t.Errorf("configuration: %q", got)
	}
	// The home page's link to itself: "home" only from the settings' link.
	counts := anchorsFor(t, x, "http://docs.example/")
	if counts["home"] != 1 || len(counts) != 1 {
		t.Errorf("home page's anchors %v", counts)
	}
	// Two pages link to the API page with "frobnicate": counted twice;
	// the home page's one link counts once.
	if c := anchorsFor(t, x, "http://docs.example/api"); c["frobnic"] != 3 || c["refer"] != 1 || c["call"] != 1 {
		t.Errorf("API page's anchors %v", c)
	}
	res, err := x.Search(t.Context(), Query{Text: "frobnicate"})
	if err != nil || len(res.Hits) != 1 || !slices.Contains(res.Hits[0].Matched, "frobnicate") {
		t.Fatalf("hit %+v %v: the anchor's word should be among the matched", res, err)
	}
	// The same records in another order, and delivered twice: the same
	// index.
	y := newTestIndex(t, nil)
	recs := linkedPages()
	slices.Reverse(recs)
	mustPut(t, y, recs...)
	mustPut(t, y, recs[1:3]...)
	if a, b := dumpKeys(t, x.db, prefixPosting, prefixDF, prefixAnchor), dumpKeys(t, y.db, prefixPosting, prefixDF, prefixAnchor); a != b {
		t.Errorf("order matters:\n%s\n%s", a, b)
	}
	// The blog post, replaced without its links, then the settings page
	// gone: their anchors leave the API page.
	post := linkedPages()[4]
	post.Time, post.Links = t0.Add(1), nil
	mustPut(t, x, post)
	cfg := gone("http://docs.example/config", t0.Add(1))
	mustPut(t, x, cfg)
	checkInvariants(t, x)
	if c := anchorsFor(t, x, "http://docs.example/api"); c["frobnic"] != 1 || c["call"] != 0 {
		t.Errorf("API page's anchors after the post and the settings changed %v", c)
	}
	if got := searchAll(t, x, "configuration"); len(got) != 0 {
		t.Errorf("configuration after the settings went: %q", got)
	}
}

// TestAnchorsBounded: a page linked with more distinct words than are
// counted keeps maxAnchorTerms of them, anchorTop in its postings; one
// record's anchors count for its first maxAnchorLinks links, with
// maxAnchorWords words each.
func TestAnchorsBounded(t *testing.T) {
	x := newTestIndex(t, nil)
	target := page("http://t.example/", "target", t0, "target", 65535)
	var recs []crawl.Record
	for i := range maxAnchorTerms + 40 {
		r := page(fmt.Sprintf("http://s%d.example/", i), "source", t0, "source", 65535)
		r.Links = []crawl.Link{{URL: target.URL, Anchor: fmt.Sprintf("w%sx", base26(i))}}
		recs = append(recs, r)
	}
	mustPut(t, x, append(recs, target)...)
	checkInvariants(t, x)
	if c := anchorsFor(t, x, target.URL); len(c) != maxAnchorTerms {
		t.Errorf("%d anchor terms counted, want %d", len(c), maxAnchorTerms)
	}
	n := 0
	for _, p := range postingsOf(t, x, target.URL) {
		if p.Anchor > 0 {
			n++
		}
	}
	if n != anchorTop {
		t.Errorf("%d postings with anchors, want %d", n, anchorTop)
	}
	long := page("http://long.example/", "long", t0, "long", 65535)
	for i := range maxAnchorLinks + 10 {
		long.Links = append(long.Links, crawl.Link{URL: fmt.Sprintf("http://l%d.example/", i), Anchor: strings.Repeat("alpha beta gamma delta epsilon zeta eta theta iota kappa ", 2)})
	}
	got := anchorsOf(&long)
	if len(got) != maxAnchorLinks {
		t.Errorf("%d linked pages, want %d", len(got), maxAnchorLinks)
	}
	for _, terms := range got {
		if len(terms) != maxAnchorWords {
			t.Fatalf("%d words of one anchor, want %d", len(terms), maxAnchorWords)
		}
	}
}

// TestMigrateV2 opens an index written by schema 2 (the code of commit
// 6d8c26b, before anchors were counted; testdata/index-v2.backup holds
// linkedPages): New counts the stored records' anchors and merges them
// into the postings, and the index is what a fresh one stores.
func TestMigrateV2(t *testing.T) {
	db := loadBackup(t, "testdata/index-v2.backup", 2)
	x := newTestIndex(t, db)
	checkInvariants(t, x)
	if v := schemaOf(t, db); v != schemaVersion {
		t.Errorf("schema %d", v)
	}
	fresh := newTestIndex(t, nil)
	mustPut(t, fresh, linkedPages()...)
	if a, b := dumpKeys(t, db, prefixRecord, prefixPosting, prefixDF, prefixAnchor), dumpKeys(t, fresh.db, prefixRecord, prefixPosting, prefixDF, prefixAnchor); a != b {
		t.Errorf("migrated index differs from a fresh one:\n%s\n%s", a, b)
	}
	if got := searchAll(t, x, "frobnicate"); !slices.Equal(got, []string{"http://docs.example/api"}) {
		t.Errorf("frobnicate after migration: %q", got)
	}
}

func anchorsFor(t *testing.T, x *Index, url string) anchorCounts {
	t.Helper()
	txn := x.db.NewTransaction(false)
	defer txn.Discard()
	a, err := getAnchorCounts(txn, idOf(url))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// postingsOf returns the postings of a page, decoded.
func postingsOf(t *testing.T, x *Index, url string) []posting {
	t.Helper()
	id := idOf(url)
	var out []posting
	txn := x.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixPosting})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		term, pid, ok := parsePostingKey(it.Item().Key())
		if !ok || pid != id {
			continue
		}
		v, _ := it.Item().ValueCopy(nil)
		w, f, a, err := decodePostingValue(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, posting{Term: term, Weight: w, Flags: f, Anchor: a})
	}
	return out
}
