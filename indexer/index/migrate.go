package index

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/kv"
)

// migrate brings an index of schema version from up to schemaVersion, then
// writes the new version. Every step can run again: one that a crash
// interrupted runs again whole at the next New, as the version is written
// last.
func (x *Index) migrate(from uint64) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	// steps[i] migrates schema i+1 to i+2; counted says what its count is of.
	steps := []struct {
		run     func() (int, error)
		counted string
	}{
		{x.migrate1to2, "pages"},
		{x.migrate2to3, "pages"},
		{x.migrate3to4, "impact lists"},
		{x.migrate4to5, "pages"},
		{x.migrate5to6, "runs"},
	}
	for i, st := range steps {
		to := uint64(i + 2)
		if from >= to {
			continue
		}
		n, err := st.run()
		if err != nil {
			return fmt.Errorf("migrating the index from schema %d to %d: %w", to-1, to, err)
		}
		x.log.Info("index schema migrated", "from", max(from, to-1), "to", to, st.counted, n)
	}
	return x.db.Update(func(txn *badger.Txn) error { return txn.Set(keySchema, encodeUvarint(schemaVersion)) })
}

// keyMigrate3 and keyMigrate5 hold the record key migrate2to3 and
// migrate4to5 go on from (migrateRecords).
var (
	keyMigrate3 = []byte(KeyPrefix + "meta/migrate3")
	keyMigrate5 = []byte(KeyPrefix + "meta/migrate5")
)

// migrate2to3 counts the anchors of every stored record's links for the
// pages they point to, and merges them into the postings of those that
// are live (anchors.go): the anchors of schema 3, stems alone
// (migrate4to5 adds the verbatim terms). It returns the records read.
func (x *Index) migrate2to3() (int, error) {
	return x.migrateRecords(keyMigrate3, func(w *wtxn, id docID) error {
		_, r, err := storedRecord(w.txn, id)
		if err != nil {
			return err
		}
		return x.updateAnchors(w, nil, stemAnchors(anchorsOf(&r)))
	})
}

// migrate4to5 adds the verbatim terms (verbatim.go) of every stored record:
// those of its title to its own postings, those of its links' anchors to
// the counts of the pages they point to. It returns the records read.
func (x *Index) migrate4to5() (int, error) {
	return x.migrateRecords(keyMigrate5, func(w *wtxn, id docID) error {
		s, r, err := storedRecord(w.txn, id)
		if err != nil {
			return err
		}
		own := indexTerms(&r)
		a, err := getAnchorCounts(w.txn, id)
		if err != nil {
			return err
		}
		top := a.top()
		if err := x.updatePostings(w, id, withAnchors(s.Postings, top), withAnchors(own, top)); err != nil {
			return err
		}
		if err := w.set(recordKey(id), (&stored{Postings: own, Record: s.Record}).encode()); err != nil {
			return err
		}
		if err := x.annotate(w, id, s.Postings, own); err != nil {
			return err
		}
		all := anchorsOf(&r)
		return x.updateAnchors(w, stemAnchors(all), all)
	})
}

// stemAnchors is a's terms without the verbatim ones.
func stemAnchors(a map[docID]map[string]bool) map[docID]map[string]bool {
	out := make(map[docID]map[string]bool, len(a))
	for id, ts := range a {
		for t := range ts {
			if isVerbatim(t) {
				continue
			}
			if out[id] == nil {
				out[id] = make(map[string]bool)
			}
			out[id][t] = true
		}
	}
	return out
}

// migrateRecords calls f on every stored record, in transactions of many,
// committing with each the record key it goes on from under cursor, so
// that a migration a crash interrupted resumes where it stopped instead
// of applying f twice to a record. It returns the records read.
func (x *Index) migrateRecords(cursor []byte, f func(w *wtxn, id docID) error) (int, error) {
	from := bytes.Clone(prefixRecord)
	err := x.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(cursor)
		if err == badger.ErrKeyNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		from, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for from != nil {
		ids, next, err := x.recordIDs(from)
		if err != nil {
			return n, err
		}
		w := x.newWtxn()
		for i, id := range ids {
			if err := f(w, id); err != nil {
				w.txn.Discard()
				return n, err
			}
			n++
			if x.full(w) && i+1 < len(ids) {
				if err := w.set(cursor, recordKey(ids[i+1])); err != nil {
					w.txn.Discard()
					return n, err
				}
				if err := x.commit(w); err != nil {
					return n, err
				}
				w = x.newWtxn()
			}
		}
		if next != nil {
			err = w.set(cursor, next)
		} else {
			err = w.del(cursor)
		}
		if err != nil {
			w.txn.Discard()
			return n, err
		}
		if err := x.commit(w); err != nil {
			return n, err
		}
		from = next
	}
	return n, nil
}

// storedRecord reads the stored value of a live page and decodes its
// record.
func storedRecord(txn *badger.Txn, id docID) (stored, crawl.Record, error) {
	s, err := getStored(txn, id)
	if err != nil {
		return stored{}, crawl.Record{}, err
	}
	r, err := crawl.DecodeRecord(s.Record)
	if err != nil {
		return stored{}, crawl.Record{}, fmt.Errorf("record %x: %w: %w", id, ErrCorruptValue, err)
	}
	return s, r, nil
}

// recordIDs returns the ids of at most migrateScan records from the key
// from on, and the key to go on from (nil at the end).
func (x *Index) recordIDs(from []byte) ([]docID, []byte, error) {
	var ids []docID
	var next []byte
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixRecord})
		defer it.Close()
		for it.Seek(from); it.ValidForPrefix(prefixRecord); it.Next() {
			if len(ids) == migrateScan {
				next = it.Item().KeyCopy(nil)
				return nil
			}
			id, ok := parseIDKey(prefixRecord, it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: record key %q", ErrCorruptValue, it.Item().Key())
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids, next, err
}

// migrateScan is how many records a migration reads in one transaction.
const migrateScan = 1024

// migrate1to2 indexes the statements of the stored records. Schema 1
// stored records with their statements (record version 2) but indexed
// none; records without statements, all of those crawled before the
// crawler extracted them, need nothing. It returns the pages re-indexed.
func (x *Index) migrate1to2() (int, error) {
	ctx := context.Background()
	from := bytes.Clone(prefixRecord)
	n := 0
	for from != nil {
		ids, next, err := x.recordsWithStatements(ctx, from)
		if err != nil {
			return n, err
		}
		from = next
		w := x.newWtxn()
		for _, id := range ids {
			if x.full(w) {
				if err := x.commit(w); err != nil {
					return n, err
				}
				w = x.newWtxn()
			}
			s, r, err := storedRecord(w.txn, id)
			if err != nil {
				w.txn.Discard()
				return n, err
			}
			stmts, _ := cleanStatements(r.Statements, x.cfg.maxStatements)
			ps := withStructTerms(s.Postings, &r, stmts)
			if slices.Equal(ps, s.Postings) {
				continue
			}
			if err := x.updatePostings(w, id, s.Postings, ps); err != nil {
				w.txn.Discard()
				return n, err
			}
			s.Postings = ps
			if err := w.set(recordKey(id), s.encode()); err != nil {
				w.txn.Discard()
				return n, err
			}
			n++
		}
		if err := x.commit(w); err != nil {
			return n, err
		}
	}
	return n, nil
}

// recordsWithStatements returns the ids of the records with statements
// among at most migrateScan records from the key from on, and the key to
// go on from (nil at the end).
func (x *Index) recordsWithStatements(ctx context.Context, from []byte) ([]docID, []byte, error) {
	var ids []docID
	var next []byte
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: prefixRecord})
		defer it.Close()
		scanned := 0
		for it.Seek(from); it.ValidForPrefix(prefixRecord); it.Next() {
			if scanned == migrateScan {
				next = it.Item().KeyCopy(nil)
				return ctx.Err()
			}
			scanned++
			id, ok := parseIDKey(prefixRecord, it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: record key %q", ErrCorruptValue, it.Item().Key())
			}
			r, err := kv.Value(it.Item(), decodeStoredRecord)
			if err != nil {
				return fmt.Errorf("record %x: %w", id, err)
			}
			if len(r.Statements) > 0 {
				ids = append(ids, id)
			}
		}
		return nil
	})
	return ids, next, err
}

// withStructTerms returns the postings of a record whose statements are
// stmts: the others of ps and the hidden terms of stmts, as indexTerms
// makes them, sorted by term.
func withStructTerms(ps []posting, r *crawl.Record, stmts []crawl.Statement) []posting {
	out := make([]posting, 0, len(ps)+16)
	for _, p := range ps {
		if p.Flags&inStruct == 0 {
			out = append(out, p)
		}
	}
	minW := uint16(65535)
	for _, k := range r.Keywords {
		minW = min(minW, k.Weight)
	}
	for _, t := range structTerms(stmts) {
		out = append(out, posting{Term: t, Weight: minW, Flags: inStruct})
	}
	slices.SortFunc(out, func(a, b posting) int { return strings.Compare(a.Term, b.Term) })
	return out
}
