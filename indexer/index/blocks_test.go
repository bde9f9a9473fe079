package index

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// TestBlocksFollowPostings stores, replaces and removes pages of a few
// frequent words with runs of three postings, packed again every few
// changes, and checks after each round that every run with its delta reads
// as the term's postings (Verify), that a join on runs ranks as one on the
// loose postings, and that a term no page has any longer leaves no block
// or delta behind.
func TestBlocksFollowPostings(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db, withBlocks(4, 3, 2, 3))
	loose := newTestIndex(t, nil)
	rng := rand.New(rand.NewPCG(7, 1))
	vocab := fixedVocabulary(12)
	at := t0
	for round := range 10 {
		var batch []crawl.Record
		for range 25 {
			at = at.Add(time.Second)
			url := fmt.Sprintf("http://h.example/p%d", rng.IntN(40))
			if rng.IntN(6) == 0 {
				batch = append(batch, gone(url, at))
			} else {
				r := randomRecord(rng, vocab, url)
				r.Time = at
				batch = append(batch, r)
			}
		}
		mustPut(t, x, batch...)
		mustPut(t, loose, batch...)
		checkInvariants(t, x)
		for range 20 {
			q := randomQuery(rng, vocab)
			a, errA := x.Search(t.Context(), q)
			b, errB := loose.Search(t.Context(), q)
			if errA != nil || errB != nil {
				if errors.Is(errA, ErrBadQuery) && errors.Is(errB, ErrBadQuery) {
					continue
				}
				t.Fatalf("round %d, %q: %v; loose postings: %v", round, q.Text, errA, errB)
			}
			if !slices.Equal(urls(a), urls(b)) || a.Total != b.Total {
				t.Fatalf("round %d, %q: blocks %v (%d), loose postings %v (%d)", round, q.Text, urls(a), a.Total, urls(b), b.Total)
			}
		}
	}
	if s := x.Stats(); s.Packs < 20 {
		t.Errorf("%d packs in ten rounds", s.Packs)
	}
	repacked := false
	for _, w := range vocab {
		st := termOf(t, x, w)
		repacked = repacked || st.gen > 1
	}
	if !repacked {
		t.Error("no term was packed twice")
	}

	// A word on five pages gets a run; once no page has it, nothing of it
	// is left.
	var solo []crawl.Record
	for i := range 5 {
		solo = append(solo, page(fmt.Sprintf("http://solo.example/%d", i), "Solo", at, "zzsolo", 9))
	}
	mustPut(t, x, solo...)
	if st := termOf(t, x, "zzsolo"); st.gen == 0 {
		t.Fatalf("zzsolo on five pages has no run: %+v", st)
	}
	var ends []crawl.Record
	for _, r := range solo {
		ends = append(ends, gone(r.URL, at.Add(time.Hour)))
	}
	mustPut(t, x, ends...)
	checkInvariants(t, x)
	if n := countKeys(t, db, blockTermPrefix("zzsolo")) + countKeys(t, db, deltaTermPrefix("zzsolo")); n != 0 {
		t.Errorf("%d keys of zzsolo's run and delta left", n)
	}
}

// termOf reads the stored state of term w.
func termOf(t *testing.T, x *Index, w string) termState {
	t.Helper()
	var st termState
	err := x.db.View(func(txn *badger.Txn) error {
		var err error
		st, err = getTermState(txn, w)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPackDropsLeftovers: blocks of a generation the term's state does not
// name, as a crash between writing a run and switching to it leaves, are
// found by Verify and deleted by the next pack.
func TestPackDropsLeftovers(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db, withBlocks(2, 2, 1, 1))
	for i := range 4 {
		mustPut(t, x, page(fmt.Sprintf("http://a.example/%d", i), "A", t0, "alpha", 5))
	}
	term := "alpha"
	st := termOf(t, x, "alpha")
	if st.gen == 0 {
		t.Fatal("alpha has no run")
	}
	var w blockWriter
	w.add(idOf("http://stray.example/"), 1, inKeyword, 0)
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(blockKey(term, st.gen+1, w.last), w.encode()) }); err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(t.Context()); err == nil {
		t.Fatal("Verify missed a stray block")
	}
	x.wmu.Lock()
	err := x.pack(term)
	x.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, x)
	if got := termOf(t, x, "alpha"); got.gen != st.gen+1 || got.delta != 0 {
		t.Errorf("state after pack %+v, before %+v", got, st)
	}
}

// TestMigrateV5 opens an index of schema 5 (no runs) and checks that New
// packs the terms frequent enough, which then answer as before.
func TestMigrateV5(t *testing.T) {
	db := openMemDB(t)
	x := newTestIndex(t, db, withBlocks(1<<30, 4, 2, 4))
	rng := rand.New(rand.NewPCG(3, 2))
	vocab := fixedVocabulary(20)
	for i := range 40 {
		mustPut(t, x, randomRecord(rng, vocab, fmt.Sprintf("http://h.example/p%d", i)))
	}
	var qs []Query
	var want [][]string
	for range 30 {
		q := randomQuery(rng, vocab)
		res, err := x.Search(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		qs, want = append(qs, q), append(want, urls(res))
	}
	x.Close()
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(keySchema, encodeUvarint(5)) }); err != nil {
		t.Fatal(err)
	}
	y := newTestIndex(t, db, withBlocks(3, 4, 2, 4))
	checkInvariants(t, y)
	if v := schemaOf(t, db); v != schemaVersion {
		t.Errorf("schema %d", v)
	}
	if y.Stats().Packs == 0 || countKeys(t, db, prefixBlock) == 0 {
		t.Fatal("no run packed")
	}
	for i, q := range qs {
		res, err := y.Search(t.Context(), q)
		if err != nil || !slices.Equal(urls(res), want[i]) {
			t.Errorf("%q: %v (%v), before %v", q.Text, urls(res), err, want[i])
		}
	}
}

// TestDecodeBlockRejects checks the shapes a block must have.
func TestDecodeBlockRejects(t *testing.T) {
	good := sampleBlock()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"no count":  {0},
		"short":     good[:len(good)-1],
		"long":      append(bytes.Clone(good), 0),
		"bad flags": append(bytes.Clone(good[:len(good)-3]), 0xff, 0, 0),
	} {
		if _, err := decodeBlock(b); err == nil {
			t.Errorf("%s: %x decoded", name, b)
		}
	}
	if _, err := decodeBlock(good); err != nil {
		t.Fatal(err)
	}
}
