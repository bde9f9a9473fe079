package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/dgraph-io/badger/v4"
)

// Posting blocks (schema 6). A join reads the postings of its terms one
// badger key each, about half a microsecond apiece: three words on most of
// 100,000 pages cost a few hundred milliseconds. So a term on at least
// config.blockMin pages keeps its postings a second time, packed: a run of
// blocks of config.blockLen postings in id order, each block one key named
// by its last id, plus a delta of one key per posting changed since the run
// was written. A query reads a run whole into memory once (runTable, kept
// in Index.runs for the next queries), and a cursor (search.go) reads it
// merged with the delta, the delta's entry winning where both have a page.
//
// The loose postings stay the truth that everything else reads (lookups of
// terms without a run, profiles, Verify). Every change of a posting of a
// term with a run is also written to its delta, in the same transaction
// (commit). When the delta holds more changes than deltaLimit allows for
// the term's frequency, the term is packed again: a new generation of
// blocks is written from the merged run and delta, the term's state
// switches to it and the old generation's delta is deleted in one
// transaction, and then the old generation's blocks. Writers hold
// Index.wmu, so nothing changes the term meanwhile; readers keep reading
// the generation their snapshot names. Blocks of a generation the state
// does not name (a crash between writing and switching) are deleted by the
// next pack.
//
// What it costs: the run holds 21 bytes a posting (its id and attributes),
// and rewriting it every deltaLimit changes writes about 21·df/deltaLimit
// bytes per change (at most 168 bytes up to 16,384 pages, about a kilobyte
// for a term on 100,000 pages); a query reads at most deltaLimit delta keys
// a term beside the run.

var (
	prefixBlock = []byte(KeyPrefix + "b/")
	prefixDelta = []byte(KeyPrefix + "q/")
)

// Keys:
//
//	/index/b/<len><t><gen:4><last id>  a block of the run of generation gen (value: block)
//	/index/q/<len><t><gen:4><id>       a posting changed since the run of generation gen:
//	                                   its posting value, or empty when the page no
//	                                   longer has it
func blockTermPrefix(t string) []byte { return cat(prefixBlock, lp(t)) }

func runPrefix(t string, gen uint32) []byte {
	return binary.BigEndian.AppendUint32(blockTermPrefix(t), gen)
}

func blockKey(t string, gen uint32, last docID) []byte { return cat(runPrefix(t, gen), last[:]) }

func deltaTermPrefix(t string) []byte { return cat(prefixDelta, lp(t)) }

// deltaPrefix is the prefix of the delta of generation gen of t. Each
// generation's delta has keys of its own, so that reading it never steps
// over the deletions that emptied the deltas of the generations before.
func deltaPrefix(t string, gen uint32) []byte {
	return binary.BigEndian.AppendUint32(deltaTermPrefix(t), gen)
}

func deltaKey(t string, gen uint32, id docID) []byte { return cat(deltaPrefix(t, gen), id[:]) }

// Defaults of the blocks: terms on 1024 pages or more, blocks of 1024
// postings (about 21 KiB), and a delta of at most an eighth of the term's
// pages, kept between 1024 and 2048 changes: rewriting a term's run costs
// 21·df bytes, so a smaller delta costs ingest more, and a larger one
// costs queries more (a delta key is read like a loose posting).
const (
	defaultBlockMin  = 1024
	defaultBlockLen  = 1024
	defaultDeltaMin  = 1024
	defaultDeltaMax  = 2048
	maxBlockLen      = 4096
	blockPostingSize = idLen + 5
)

// deltaLimit is how many changes the delta of a term on df pages holds
// before the term is packed again.
func (c *config) deltaLimit(df uint64) uint64 {
	return min(max(df/8, uint64(c.deltaMin)), uint64(c.deltaMax))
}

// A block is a uvarint count n, then n ids in ascending order, then n
// attributes of five bytes: weight (u16), flags (the page's own, u8) and
// anchor weight (u16, 0 for none).
type blockWriter struct {
	ids   []byte
	attrs []byte
	n     int
	last  docID
}

func (b *blockWriter) add(id docID, w uint16, flags uint8, a uint16) {
	b.ids = append(b.ids, id[:]...)
	b.attrs = append(b.attrs, byte(w>>8), byte(w), flags, byte(a>>8), byte(a))
	b.n++
	b.last = id
}

func (b *blockWriter) encode() []byte {
	out := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(b.ids)+len(b.attrs)), uint64(b.n))
	out = append(out, b.ids...)
	return append(out, b.attrs...)
}

func (b *blockWriter) reset() { b.ids, b.attrs, b.n = b.ids[:0], b.attrs[:0], 0 }

// block is a decoded view of a block value.
type block struct {
	ids, attrs []byte
	n          int
}

// decodeBlock checks a block's shape (count and length; Verify checks the
// order of its ids) and returns a view of it.
func decodeBlock(v []byte) (block, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > maxBlockLen || uint64(len(v)-k) != n*blockPostingSize {
		return block{}, fmt.Errorf("%w: posting block of %d bytes", ErrCorruptValue, len(v))
	}
	ids := v[k : k+int(n)*idLen]
	attrs := v[k+int(n)*idLen:]
	for i := range int(n) {
		if attrs[i*5+2]&^ownFlags != 0 {
			return block{}, fmt.Errorf("%w: posting block: attributes %x", ErrCorruptValue, attrs[i*5:i*5+5])
		}
	}
	return block{ids: ids, attrs: attrs, n: int(n)}, nil
}

func (b *block) id(i int) docID { return docID(b.ids[i*idLen : (i+1)*idLen]) }

func (b *block) attr(i int) (w uint16, flags uint8, a uint16) {
	p := b.attrs[i*5:]
	return uint16(p[0])<<8 | uint16(p[1]), p[2], uint16(p[3])<<8 | uint16(p[4])
}

// lastBelow reports whether the block's last id is below id.
func (b *block) lastBelow(id docID) bool {
	last := b.id(b.n - 1)
	return compareIDs(&last, &id) < 0
}

// search returns the first position from i whose id is not below id:
// it gallops from i (in a dense join the target is a few postings ahead),
// then searches the last stretch.
func (b *block) search(i int, id docID) int {
	notBelow := func(j int) bool { at := b.id(j); return compareIDs(&at, &id) >= 0 }
	// Every position below lo is below id; hi is the next probed, twice
	// as far each time.
	lo, hi, step := i, i, 1
	for hi < b.n && !notBelow(hi) {
		lo, hi, step = hi+1, hi+step, step*2
	}
	hi = min(hi, b.n)
	return lo + sort.Search(hi-lo, func(j int) bool { return notBelow(lo + j) })
}

// runTable is a run of blocks read whole: every block's ids and
// attributes in order, as one block. A generation of a term is written
// once and never changes (generations are never used twice), so tables
// are shared between queries in Index.runs, whatever their snapshot.
type runTable struct {
	gen uint32
	blk block
}

// runCacheKey names generation gen of t in Index.runs.
func runCacheKey(t string, gen uint32) string {
	return string(binary.BigEndian.AppendUint32([]byte(t), gen))
}

// table returns the run of t of state st, from Index.runs or read in txn.
func (x *Index) table(txn *badger.Txn, t string, st termState) (*runTable, error) {
	key := runCacheKey(t, st.gen)
	if r, ok := x.runs.Get(key); ok {
		return r, nil
	}
	r := &runTable{gen: st.gen}
	// The run holds about df postings: one allocation each.
	n := min(st.df, maxRunTable)
	r.blk.ids, r.blk.attrs = make([]byte, 0, n*idLen), make([]byte, 0, n*5)
	p := runPrefix(t, st.gen)
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: p})
	defer it.Close()
	for it.Seek(p); it.ValidForPrefix(p); it.Next() {
		item := it.Item()
		if len(item.Key()) != len(p)+idLen {
			return nil, fmt.Errorf("%w: block key %q", ErrCorruptValue, item.Key())
		}
		err := item.Value(func(v []byte) error {
			b, err := decodeBlock(v)
			if err == nil && r.blk.n > 0 {
				if last, first := r.blk.id(r.blk.n-1), b.id(0); compareIDs(&last, &first) >= 0 {
					err = fmt.Errorf("%w: blocks of %q out of order", ErrCorruptValue, t)
				}
			}
			if err == nil {
				r.blk.ids = append(r.blk.ids, b.ids...)
				r.blk.attrs = append(r.blk.attrs, b.attrs...)
				r.blk.n += b.n
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	x.runs.Set(key, r, int64(len(r.blk.ids)+len(r.blk.attrs)))
	return r, nil
}

// maxRunTable bounds the postings table allocates room for at once.
const maxRunTable = 1 << 22

// delta is a term's delta read whole, for lookups.
type delta map[docID]deltaEntry

type deltaEntry struct {
	w, a uint16
	fl   uint8
	gone bool
}

// loadDelta reads the delta of generation gen of t.
func loadDelta(txn *badger.Txn, t string, gen uint32) (delta, error) {
	d := make(delta)
	// A cursor of a term with a run reads an empty value as a removal.
	c := &cursor{prefix: deltaPrefix(t, gen), run: &runTable{gen: gen}}
	c.it = txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: c.prefix})
	defer c.it.Close()
	for c.it.Seek(c.prefix); ; c.it.Next() {
		if c.read(); !c.lok {
			break
		}
		d[c.lid] = deltaEntry{w: c.lw, a: c.la, fl: c.lflags, gone: c.lgone}
	}
	return d, c.err
}

// lookup returns the posting of page id in a run with its delta.
func (r *runTable) lookup(d delta, id docID) (w uint16, flags uint8, anchor uint16, found bool) {
	if e, ok := d[id]; ok {
		return e.w, e.fl, e.a, !e.gone
	}
	i := r.blk.search(0, id)
	if i == r.blk.n || r.blk.id(i) != id {
		return 0, 0, 0, false
	}
	w, flags, anchor = r.blk.attr(i)
	return w, flags, anchor, true
}

// pack writes the run of t anew from its postings as a cursor reads them
// (the old run and the delta, or the loose postings for a term without a
// run), switches the term's state to it, empties the delta and deletes the
// older generations. Called with wmu held.
func (x *Index) pack(t string) error {
	var st termState
	err := x.db.View(func(txn *badger.Txn) error {
		var err error
		st, err = getTermState(txn, t)
		return err
	})
	if err != nil || st.df == 0 {
		return err
	}
	was := st.gen
	gen, err := x.nextGen()
	if err != nil {
		return err
	}
	if err := x.dropBlocks(t, func(g uint32) bool { return g != st.gen }); err != nil {
		return err
	}
	wb := x.db.NewWriteBatch()
	defer wb.Cancel()
	err = x.db.View(func(txn *badger.Txn) error {
		c, err := x.openCursor(txn, t, st, 0)
		if err != nil {
			return err
		}
		defer c.close()
		var b blockWriter
		for ; c.ok; c.next() {
			b.add(c.id, c.w, c.flags, c.a)
			if b.n == x.cfg.blockLen {
				if err := wb.Set(blockKey(t, gen, b.last), b.encode()); err != nil {
					return err
				}
				b.reset()
			}
		}
		if c.err != nil {
			return c.err
		}
		if b.n > 0 {
			return wb.Set(blockKey(t, gen, b.last), b.encode())
		}
		return nil
	})
	if err == nil {
		err = wb.Flush()
	}
	if err != nil {
		return err
	}
	err = x.db.Update(func(txn *badger.Txn) error {
		if st, err = getTermState(txn, t); err != nil || st.df == 0 {
			return err
		}
		st.gen, st.delta = gen, 0
		if err := txn.Set(dfKey(t), st.encode()); err != nil {
			return err
		}
		return deleteAll(txn, deltaPrefix(t, was))
	})
	if err != nil {
		return err
	}
	x.packs.Add(1)
	x.cacheTerm(t, st)
	x.runs.Del(runCacheKey(t, was))
	return x.dropBlocks(t, func(g uint32) bool { return g != gen })
}

// keyGen holds the last generation of blocks given to any term, so that
// no generation is used twice, not even by a term that had a run, lost
// all its pages and came back.
var keyGen = []byte(KeyPrefix + "meta/gen")

// nextGen returns a generation never used before.
func (x *Index) nextGen() (uint32, error) {
	var gen uint64
	err := x.db.Update(func(txn *badger.Txn) error {
		last, err := getUvarint(txn, keyGen)
		if err != nil {
			return err
		}
		if last >= math.MaxUint32 {
			return fmt.Errorf("%w: block generations used up", ErrCorruptValue)
		}
		gen = last + 1
		return txn.Set(keyGen, encodeUvarint(gen))
	})
	return uint32(gen), err
}

// packAll packs the terms in order.
func (x *Index) packAll(terms []string) error {
	for _, t := range terms {
		if err := x.pack(t); err != nil {
			return fmt.Errorf("packing the postings of %q: %w", t, err)
		}
	}
	return nil
}

// dropBlocks deletes the blocks of t whose generation drop reports.
func (x *Index) dropBlocks(t string, drop func(gen uint32) bool) error {
	wb := x.db.NewWriteBatch()
	defer wb.Cancel()
	p := blockTermPrefix(t)
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: p})
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			k := it.Item().Key()
			if len(k) != len(p)+4+idLen {
				return fmt.Errorf("%w: block key %q", ErrCorruptValue, k)
			}
			if drop(binary.BigEndian.Uint32(k[len(p):])) {
				if err := wb.Delete(bytes.Clone(k)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return wb.Flush()
}

// deleteAll deletes every key under p in txn.
func deleteAll(txn *badger.Txn, p []byte) error {
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: p})
	defer it.Close()
	var ks [][]byte
	for it.Seek(p); it.ValidForPrefix(p); it.Next() {
		ks = append(ks, it.Item().KeyCopy(nil))
	}
	for _, k := range ks {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// postingChange is a change of one posting, written to the delta of a
// term that has a run (commit).
type postingChange struct {
	term string
	id   docID
	has  bool // the page has the term after the change
	w    uint16
	fl   uint8
	a    uint16
}

// applyDeltas writes the noted changes of the terms whose state says they
// have a run, and returns how many each got. Called by commit, state
// holding every noted term.
func applyDeltas(w *wtxn, state map[string]termState) (map[string]uint64, error) {
	added := make(map[string]uint64)
	for _, c := range w.chg {
		if state[c.term].gen == 0 {
			continue
		}
		var v []byte
		if c.has {
			v = encodePostingValue(c.w, c.fl, c.a)
		}
		if err := w.txn.Set(deltaKey(c.term, state[c.term].gen, c.id), v); err != nil {
			return nil, err
		}
		added[c.term]++
	}
	return added, nil
}

// migrate5to6 packs the terms frequent enough to have a run. A crash
// leaves the terms packed so far packed; the rest are packed at the next
// New.
func (x *Index) migrate5to6() (int, error) {
	terms, err := x.termsWhere(func(s termState) bool { return s.df >= uint64(x.cfg.blockMin) && s.gen == 0 })
	if err != nil {
		return 0, err
	}
	if len(terms) > 0 {
		x.log.Info("packing posting blocks", "terms", len(terms))
	}
	return len(terms), x.packAll(terms)
}

// termsWhere returns the terms whose state f accepts, in order.
func (x *Index) termsWhere(f func(termState) bool) ([]string, error) {
	var terms []string
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDF})
		defer it.Close()
		for it.Seek(prefixDF); it.ValidForPrefix(prefixDF); it.Next() {
			item := it.Item()
			err := item.Value(func(v []byte) error {
				s, err := decodeTermState(v)
				if err != nil {
					return fmt.Errorf("term %q: %w", item.Key()[len(prefixDF):], err)
				}
				if f(s) {
					terms = append(terms, string(item.Key()[len(prefixDF):]))
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return terms, err
}
