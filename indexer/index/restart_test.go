package index

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

func openDiskDB(t *testing.T, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(crawl.BadgerOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// snapshot is everything a user can observe, for comparison across a
// restart.
type snapshot struct {
	stats   Stats
	search  []string
	matches []string
	export  string
	profile Profile
}

func observe(t *testing.T, x *Index) snapshot {
	t.Helper()
	var s snapshot
	s.stats = x.Stats()
	for _, q := range []Query{{Text: "wbx"}, {Text: "wbx wcx", Any: true, Limit: 50}, {Text: "wdx -wbx"}} {
		res, err := x.Search(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range res.Hits {
			s.search = append(s.search, h.URL+" "+time.Duration(h.Score*1e9).String())
		}
	}
	mp, err := x.Matches(t.Context(), "p", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mp.Matches {
		s.matches = append(s.matches, m.URL)
	}
	var buf bytes.Buffer
	if _, err := x.Export(t.Context(), &buf); err != nil {
		t.Fatal(err)
	}
	s.export = buf.String()
	s.profile, _ = x.Profile(t.Context(), "p")
	return s
}

func TestRestart(t *testing.T) {
	dir := t.TempDir()
	db := openDiskDB(t, dir)
	x := newTestIndex(t, db)
	recs := corpus(300, 5)
	mustPut(t, x, recs[:200]...)
	if _, err := x.PutProfile(t.Context(), Profile{Name: "p", Threshold: 0.01, Keywords: []ProfileKeyword{{"wbx", 2}, {"wcx", 1}}}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, x, recs[200:]...)
	mustPut(t, x, gone(recs[0].URL, testNow), gone(recs[1].URL, testNow))
	before := observe(t, x)
	if before.stats.Docs != 298 || before.stats.Tombstones != 2 || before.stats.Matches == 0 || len(before.search) == 0 {
		t.Fatalf("before: %+v", before.stats)
	}
	x.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDiskDB(t, dir)
	t.Cleanup(func() { db.Close() })
	x = newTestIndex(t, db)
	after := observe(t, x)
	if !after.stats.LastIngest.Equal(before.stats.LastIngest) {
		t.Errorf("last ingest %v, was %v", after.stats.LastIngest, before.stats.LastIngest)
	}
	after.stats.LastIngest = before.stats.LastIngest
	switch {
	case after.stats != before.stats:
		t.Errorf("stats changed across restart:\nbefore %+v\nafter  %+v", before.stats, after.stats)
	case !equalStrings(after.search, before.search):
		t.Errorf("search changed across restart")
	case !equalStrings(after.matches, before.matches) || after.profile.Matches != before.profile.Matches:
		t.Errorf("matches changed across restart")
	case after.export != before.export:
		t.Errorf("export changed across restart")
	}
	checkInvariants(t, x)
	// Still idempotent after the restart: nothing is stored twice.
	res := mustPut(t, x, recs[100:]...)
	if res.Duplicates != 200 {
		t.Fatalf("re-delivery after restart: %+v", res)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRecoverInterruptedProfileChanges: a profile left pending (crash
// during its rebuild) is rebuilt by New, one left deleting is removed.
func TestRecoverInterruptedProfileChanges(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db)
	mustPut(t, x, corpus(200, 3)...)
	ctx := t.Context()
	for _, name := range []string{"keep", "drop"} {
		if _, err := x.PutProfile(ctx, Profile{Name: name, Keywords: []ProfileKeyword{{"wbx", 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := x.Matches(ctx, "keep", 100, 0)
	x.Close()

	// Simulate crashes: PutProfile wrote "keep" pending with a higher
	// threshold and stopped before rebuilding its matches; DeleteProfile
	// marked "drop" deleting and stopped.
	err := db.Update(func(txn *badger.Txn) error {
		for name, state := range map[string]byte{"keep": profilePending, "drop": profileDeleting} {
			item, err := txn.Get(profileKey(name))
			if err != nil {
				return err
			}
			b, _ := item.ValueCopy(nil)
			v, err := decodeProfileValue(b)
			if err != nil {
				return err
			}
			v.State = state
			v.Threshold = 0.5
			if err := txn.Set(profileKey(name), v.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	x = newTestIndex(t, db)
	got, err := x.Matches(ctx, "keep", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	strong := 0
	for _, m := range want.Matches {
		if m.Relevance >= 0.5 {
			strong++
		}
	}
	if got.Total != int64(strong) || len(got.Matches) != strong || strong == 0 || strong == len(want.Matches) {
		t.Fatalf("rebuilt: %d matches, want %d of %d", got.Total, strong, len(want.Matches))
	}
	if p, _ := x.Profile(ctx, "keep"); p.Pending {
		t.Fatal("still pending")
	}
	if _, err := x.Profile(ctx, "drop"); err == nil {
		t.Fatal("deleting profile survived")
	}
	if err := x.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}
