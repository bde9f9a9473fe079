package crawl

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func openMemDB(t testing.TB) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openDiskDB(t testing.TB, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithNumVersionsToKeep(1))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func addURL(t *testing.T, f *frontier, raw, parent string, hops int, now time.Time) addResult {
	t.Helper()
	u, _ := url.Parse(raw)
	r, err := f.add(entry{URL: raw, Parent: parent, Depth: 3, Hops: hops}, u, false, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFrontierOrderAndSeen(t *testing.T) {
	db := openMemDB(t)
	f, err := openFrontier(db, 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	addURL(t, f, "http://a.org/deep", "http://a.org/", 3, now)
	addURL(t, f, "http://a.org/shallow", "http://a.org/", 1, now)
	addURL(t, f, "http://a.org/popular", "http://a.org/", 2, now)
	for range 20 { // many in-links raise its importance
		if r := addURL(t, f, "http://a.org/popular", "http://a.org/p", 2, now); r != addSeen {
			t.Fatalf("seen URL re-added: %v", r)
		}
	}
	addURL(t, f, "http://b.org/", "", 0, now.Add(time.Second))

	l, _, err := f.next(now)
	if err != nil || l == nil || l.entry.URL != "http://a.org/shallow" {
		t.Fatalf("first = %+v %v", l, err)
	}
	// The host is leased: nothing else ready at now from a.org, b.org not yet.
	if l2, wait, _ := f.next(now); l2 != nil || !wait.Equal(now.Add(time.Second)) {
		t.Fatalf("second = %+v wait %v", l2, wait)
	}
	if err := f.finish(l, false, now.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, _, _ = f.next(now.Add(2 * time.Second))
	if l == nil || l.entry.URL != "http://b.org/" {
		t.Fatalf("expected b.org, got %+v", l)
	}
	f.finish(l, false, now.Add(2*time.Second))
	l, _, _ = f.next(now.Add(5 * time.Second))
	if l == nil || l.entry.URL != "http://a.org/popular" {
		t.Fatalf("importance not used: %+v", l)
	}
	// Retry keeps the entry with attempts raised.
	f.finish(l, true, now.Add(6*time.Second))
	l, _, _ = f.next(now.Add(6 * time.Second))
	if l == nil || l.entry.URL != "http://a.org/popular" || l.entry.Attempts != 1 {
		t.Fatalf("retry: %+v", l)
	}
	f.finish(l, false, now.Add(6*time.Second))
	if n, _ := f.queued(); n != 1 {
		t.Fatalf("%d queued, want 1", n)
	}
	if r := addURL(t, f, "http://a.org/shallow", "http://a.org/x", 1, now); r != addSeen {
		t.Fatalf("fetched URL re-queued: %v", r)
	}
}

func TestFrontierSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	db := openDiskDB(t, dir)
	f, err := openFrontier(db, 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		addURL(t, f, "http://a.org/"+p, "http://a.org/", 1, now)
	}
	l, _, _ := f.next(now)
	f.finish(l, false, now) // a is done
	l, _, _ = f.next(now)   // b is leased when we "crash" (no clean close)
	if l == nil {
		t.Fatal("no lease")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	for _, clean := range []bool{false, true} {
		db = openDiskDB(t, dir)
		f, err = openFrontier(db, 1000, time.Minute, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The seen set (rebuilt or restored Bloom filter) still knows a.
		if r := addURL(t, f, "http://a.org/a", "http://a.org/x", 1, now); r != addSeen {
			t.Fatalf("clean=%v: seen set lost: %v", clean, r)
		}
		if n, _ := f.queued(); n != 2 {
			t.Fatalf("clean=%v: %d queued, want 2", clean, n)
		}
		// The interrupted request comes back: after the crash the open
		// released its lease (no delay given here); after the clean close
		// it had been put back, as the crawler's Close does.
		l, _, _ = f.next(time.Now())
		if l == nil || l.entry.URL != "http://a.org/b" {
			t.Fatalf("clean=%v: leased request lost: %+v", clean, l)
		}
		if err := f.putBack(l, now); err != nil {
			t.Fatal(err)
		}
		if err := f.close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRevisits(t *testing.T) {
	db := openMemDB(t)
	f, _ := openFrontier(db, 100, time.Minute, 1, nil)
	now := time.Unix(1000, 0)
	e := entry{URL: "http://a.org/r", Depth: 1}
	if err := f.update(e.URL, func(p *pageState) { p.Visits = 1 }, now.Add(time.Hour), &e); err != nil {
		t.Fatal(err)
	}
	// Rescheduling replaces the earlier revisit.
	if err := f.update(e.URL, func(p *pageState) {}, now.Add(2*time.Hour), &e); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.dueRevisits(now.Add(90*time.Minute), 10); n != 0 {
		t.Fatalf("%d revisits due early", n)
	}
	if n, _ := f.dueRevisits(now.Add(3*time.Hour), 10); n != 1 {
		t.Fatalf("%d revisits due, want 1", n)
	}
	l, _, _ := f.next(now.Add(3 * time.Hour))
	if l == nil || l.entry.URL != e.URL || !l.entry.Revisit {
		t.Fatalf("revisit not queued: %+v", l)
	}
}

// TestFrontierSeekHints drains part of a host queue (leaving tombstones the
// seek hints skip) and then queues a request that sorts before the hint; it
// must come out first, and the ready index must still find every host.
func TestFrontierSeekHints(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(5000, 0)
	for i := range 10 {
		addURL(t, f, fmt.Sprintf("http://a.org/%d", i), "http://a.org/", 3, now)
	}
	for i := range 5 {
		l, _, err := f.next(now)
		if err != nil || l == nil || l.entry.URL != fmt.Sprintf("http://a.org/%d", i) {
			t.Fatalf("lease %d: %+v %v", i, l, err)
		}
		if err := f.finish(l, false, now); err != nil {
			t.Fatal(err)
		}
	}
	// Fewer hops: sorts before everything left, and before the hint.
	addURL(t, f, "http://a.org/urgent", "http://a.org/", 1, now)
	// A host whose ready time is before the ready-index hint.
	addURL(t, f, "http://b.org/", "", 0, now.Add(-time.Hour))
	l, _, _ := f.next(now)
	if l == nil || l.entry.URL != "http://b.org/" {
		t.Fatalf("earlier host missed: %+v", l)
	}
	f.finish(l, false, now)
	l, _, _ = f.next(now)
	if l == nil || l.entry.URL != "http://a.org/urgent" {
		t.Fatalf("entry before the hint missed: %+v", l)
	}
	f.finish(l, false, now)
	for i := 5; i < 10; i++ {
		l, _, _ = f.next(now)
		if l == nil || l.entry.URL != fmt.Sprintf("http://a.org/%d", i) {
			t.Fatalf("entry %d: %+v", i, l)
		}
		f.finish(l, false, now)
	}
	if q, h := f.counts(); q != 0 {
		t.Fatalf("counts %d, %d after draining", q, h)
	}
}

// TestFrontierBatchAndCounts checks that one batch with duplicates queues
// each URL once and that the kept counts agree with a scan, also after a
// clean and an unclean restart.
func TestFrontierBatchAndCounts(t *testing.T) {
	dir := t.TempDir()
	db := openDiskDB(t, dir)
	f, err := openFrontier(db, 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	var es []entry
	var us []*url.URL
	for _, s := range []string{"http://a.org/1", "http://a.org/2", "http://a.org/1", "http://b.org/1", "http://a.org/2"} {
		u, _ := url.Parse(s)
		es = append(es, entry{URL: s, Parent: "http://a.org/", Depth: 2, Hops: 1})
		us = append(us, u)
	}
	res, err := f.addBatch(es, us, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []addResult{addQueued, addQueued, addSeen, addQueued, addSeen}; !slices.Equal(res, want) {
		t.Fatalf("results %v, want %v", res, want)
	}
	check := func(when string, wantQ, wantH int64) {
		t.Helper()
		q, h := f.counts()
		n, _ := f.queued()
		if q != wantQ || h != wantH || int64(n) != q {
			t.Fatalf("%s: counts %d queued (scan %d), %d hosts; want %d, %d", when, q, n, h, wantQ, wantH)
		}
	}
	check("after batch", 3, 2)
	l, _, _ := f.next(now)
	f.finish(l, false, now)
	check("after one fetch", 2, 2)
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, clean := range []bool{true, false} {
		db = openDiskDB(t, dir)
		if f, err = openFrontier(db, 1000, time.Minute, 1, nil); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("reopened clean=%v", clean), 2, 2)
		if clean {
			db.Close() // a crash: no f.close
			continue
		}
		f.close()
		db.Close()
	}
}

// TestFrontierPerHost checks that with perHost > 1 several requests of one
// host are checked out at once, never the same one twice and never more
// than perHost, and that putBack returns a lease unused.
func TestFrontierPerHost(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for i := range 3 {
		addURL(t, f, fmt.Sprintf("http://a.org/%d", i), "http://a.org/", 1, now)
	}
	l1, _, _ := f.next(now)
	l2, _, _ := f.next(now)
	if l1 == nil || l2 == nil || l1.entry.URL == l2.entry.URL {
		t.Fatalf("two leases: %+v %+v", l1, l2)
	}
	if l3, _, _ := f.next(now); l3 != nil {
		t.Fatalf("third lease over perHost: %+v", l3)
	}
	if err := f.putBack(l2, now); err != nil {
		t.Fatal(err)
	}
	l3, _, _ := f.next(now)
	if l3 == nil || l3.entry.URL != l2.entry.URL {
		t.Fatalf("put-back request not handed out again: %+v", l3)
	}
	f.finish(l1, false, now)
	l4, _, _ := f.next(now)
	if l4 == nil || l4.entry.URL == l3.entry.URL || l4.entry.URL == l1.entry.URL {
		t.Fatalf("fourth lease: %+v", l4)
	}
}
