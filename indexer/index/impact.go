package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/internal/kv"
)

// Impact lists: the postings of a frequent term a second time, ordered by
// how much they can add to a page's score, heaviest first (schema 4).
// They let a query of frequent words stop once no unread page can enter
// its top k (threshold.go) instead of joining lists of the whole corpus.
//
// A term has one once its document frequency reaches config.impactMin;
// its termState says so, and from then on every change of its postings
// changes its impact list in the same transaction. A list is built (or
// rebuilt after a crash) whole, in transactions of its own, before the
// flag that makes search use it is written.

// defaultImpactMin is the document frequency from which a term has an
// impact list. Below it, a join led by the term reads few postings; the
// list costs one more key for each of the term's postings.
const defaultImpactMin = 1024

// maxImpact is the largest impact: a title term of full weight with full
// anchor weight.
const maxImpact = 2 + impactBoost

// impactBoost is the title boost impacts are computed with. A query run
// with a higher boost scales its bounds by the ratio (impactSlack), so a
// changed configuration needs no rebuild.
const impactBoost = 0.5

// impactOf is the impact of a posting: what it adds to a score, per unit
// of idf, under title boost impactBoost. Impacts are kept exact (float64
// in the key), so that a list's order is that of a one-word query's hits.
func impactOf(w uint16, flags uint8, anchor uint16) float64 {
	return termScore(1, w, flags, anchor, impactBoost)
}

// impactBound is the most a posting of impact s adds to a score, for a
// term of weight idf, under title boost b: at boost impactBoost or below,
// exactly what it adds at impactBoost (rounding is monotonic); above, that
// scaled by impactSlack and a billionth more against rounding.
func impactBound(s, idf, b float64) float64 {
	if b <= impactBoost {
		return idf * s
	}
	return idf * s * impactSlack(b) * (1 + 1e-9)
}

// impactSlack is how much more than its impact a posting may add under
// title boost b.
func impactSlack(b float64) float64 {
	return max(1, (1+b)/(1+impactBoost))
}

// impactKey orders the postings of t by descending impact s (≥ 0, so its
// IEEE bits order as it does), then by id.
func impactKey(t string, s float64, id docID) []byte {
	return cat(prefixImpact, lp(t), binary.BigEndian.AppendUint64(nil, ^math.Float64bits(s)), id[:])
}

func impactPrefix(t string) []byte { return cat(prefixImpact, lp(t)) }

// parseImpactKey returns the impact and id of an impact key of a known
// prefix.
func parseImpactKey(prefix, k []byte) (float64, docID, bool) {
	var id docID
	if len(k) != len(prefix)+8+idLen || !bytes.HasPrefix(k, prefix) {
		return 0, id, false
	}
	s := math.Float64frombits(^binary.BigEndian.Uint64(k[len(prefix):]))
	if !(s >= 0 && s <= maxImpact) { // also NaN
		return 0, id, false
	}
	copy(id[:], k[len(prefix)+8:])
	return s, id, true
}

// termState is the value of a term's /index/t/ key: its document
// frequency, whether its impact list is complete and maintained, and the
// generation of its run of posting blocks (0: none; blocks.go) with the
// changes its delta holds.
type termState struct {
	df     uint64
	impact bool
	gen    uint32
	delta  uint64
}

// Bits of the byte after a term state's frequency.
const (
	stateImpact = 1 << 0
	stateBlocks = 1 << 1
)

// encode writes the frequency as a uvarint, followed, when the term has an
// impact list or blocks, by one byte of stateImpact and stateBlocks, and
// with blocks the generation and the delta's changes as uvarints (older
// schemas: the uvarint alone, or with the byte 1).
func (s termState) encode() []byte {
	b := binary.AppendUvarint(nil, s.df)
	var f byte
	if s.impact {
		f |= stateImpact
	}
	if s.gen > 0 {
		f |= stateBlocks
	}
	if f == 0 {
		return b
	}
	b = append(b, f)
	if s.gen > 0 {
		b = binary.AppendUvarint(b, uint64(s.gen))
		b = binary.AppendUvarint(b, s.delta)
	}
	return b
}

func decodeTermState(b []byte) (termState, error) {
	bad := fmt.Errorf("%w: term state %x", ErrCorruptValue, b)
	v, n := binary.Uvarint(b)
	if n <= 0 || v == 0 {
		return termState{}, bad
	}
	s := termState{df: v}
	if n == len(b) {
		return s, nil
	}
	f := b[n]
	if f == 0 || f&^(stateImpact|stateBlocks) != 0 {
		return termState{}, bad
	}
	s.impact = f&stateImpact != 0
	rest := b[n+1:]
	if f&stateBlocks == 0 {
		if len(rest) != 0 {
			return termState{}, bad
		}
		return s, nil
	}
	g, k := binary.Uvarint(rest)
	if k <= 0 || g == 0 || g > math.MaxUint32 {
		return termState{}, bad
	}
	d, k2 := binary.Uvarint(rest[k:])
	if k2 <= 0 || k+k2 != len(rest) {
		return termState{}, bad
	}
	s.gen, s.delta = uint32(g), d
	return s, nil
}

func getTermState(txn *badger.Txn, t string) (termState, error) {
	s, _, err := kv.Decode(txn, dfKey(t), decodeTermState)
	return s, err
}

// impactChange is a change of one posting's impact, applied in commit to
// terms that have an impact list.
type impactChange struct {
	term     string
	id       docID
	old, new float64
	had, has bool // whether the posting was there before, and is after
}

// noteChange records the change of a posting from old to new (nil: absent)
// for the term's impact list and its delta, should it have them.
func (w *wtxn) noteChange(t string, id docID, old, new *posting) {
	pc := postingChange{term: t, id: id, has: new != nil}
	if new != nil {
		pc.w, pc.fl, pc.a = new.Weight, new.Flags, new.Anchor
	}
	w.chg = append(w.chg, pc)
	// Counted as if the term had a run.
	w.size += int64(len(prefixDelta) + 1 + len(t) + idLen + 5 + 24)
	w.count++
	c := impactChange{term: t, id: id, had: old != nil, has: new != nil}
	if old != nil {
		c.old = impactOf(old.Weight, old.Flags, old.Anchor)
	}
	if new != nil {
		c.new = impactOf(new.Weight, new.Flags, new.Anchor)
	}
	if c.had && c.has && c.old == c.new {
		return
	}
	w.imp = append(w.imp, c)
	// Counted as if the term had a list, so that the transaction's budget
	// holds either way.
	n := len(prefixImpact) + 1 + len(t) + 8 + idLen + 24
	if c.had {
		w.size += int64(n)
		w.count++
	}
	if c.has {
		w.size += int64(n)
		w.count++
	}
}

// applyImpacts writes the noted changes of the terms whose state says they
// have an impact list. Called by commit, state holding every noted term.
func applyImpacts(w *wtxn, state map[string]termState) error {
	for _, c := range w.imp {
		if !state[c.term].impact {
			continue
		}
		if c.had {
			if err := w.txn.Delete(impactKey(c.term, c.old, c.id)); err != nil {
				return err
			}
		}
		if c.has {
			if err := w.txn.Set(impactKey(c.term, c.new, c.id), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildImpact writes the impact list of t from its postings, then marks
// the term's state. Any list a crash left half built is removed first.
// Called with wmu held, so no posting of t changes meanwhile; the writes
// go in batches of their own, the flag last.
func (x *Index) buildImpact(t string) error {
	// The term being built is noted first, so that New finishes a build a
	// crash interrupted.
	if err := x.db.Update(func(txn *badger.Txn) error { return txn.Set(keyBuilding, []byte(t)) }); err != nil {
		return err
	}
	wb := x.db.NewWriteBatch()
	defer wb.Cancel()
	err := x.db.View(func(txn *badger.Txn) error {
		ip := impactPrefix(t)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: ip})
		for it.Seek(ip); it.ValidForPrefix(ip); it.Next() {
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				it.Close()
				return err
			}
		}
		it.Close()
		pp := postingPrefix(t)
		it = txn.NewIterator(badger.IteratorOptions{Prefix: pp})
		defer it.Close()
		for it.Seek(pp); it.ValidForPrefix(pp); it.Next() {
			item := it.Item()
			id, ok := postingID(pp, item.Key())
			if !ok {
				return fmt.Errorf("%w: posting key %q", ErrCorruptValue, item.Key())
			}
			var q float64
			err := item.Value(func(v []byte) error {
				w, fl, a, err := decodePostingValue(v)
				q = impactOf(w, fl, a)
				return err
			})
			if err != nil {
				return err
			}
			if err := wb.Set(impactKey(t, q, id), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	var s termState
	err = x.db.Update(func(txn *badger.Txn) error {
		var err error
		if s, err = getTermState(txn, t); err != nil || s.df == 0 {
			return err
		}
		s.impact = true
		return txn.Set(dfKey(t), s.encode())
	})
	if err == nil {
		err = x.db.Update(func(txn *badger.Txn) error { return txn.Delete(keyBuilding) })
	}
	if err == nil && s.df > 0 {
		x.cacheTerm(t, s)
	}
	return err
}

// keyBuilding holds the term whose impact list is being built.
var keyBuilding = []byte(KeyPrefix + "meta/building")

// finishBuild builds the impact list a crash left half built, if any.
func (x *Index) finishBuild() error {
	var t []byte
	err := x.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(keyBuilding)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err == nil {
			t, err = item.ValueCopy(nil)
		}
		return err
	})
	if err != nil || t == nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return x.buildImpacts([]string{string(t)})
}

// buildImpacts builds the impact lists of terms that reached the
// threshold without one.
func (x *Index) buildImpacts(terms []string) error {
	for _, t := range terms {
		if err := x.buildImpact(t); err != nil {
			return fmt.Errorf("building the impact list of %q: %w", t, err)
		}
	}
	return nil
}

// migrate3to4 builds the impact lists of the terms frequent enough to have
// one. A crash leaves the terms built so far marked; the rest are built at
// the next New.
func (x *Index) migrate3to4() (int, error) {
	terms, err := x.termsWhere(func(s termState) bool { return s.df >= uint64(x.cfg.impactMin) && !s.impact })
	if err != nil {
		return 0, err
	}
	if len(terms) > 0 {
		x.log.Info("building impact lists", "terms", len(terms))
	}
	return len(terms), x.buildImpacts(terms)
}
