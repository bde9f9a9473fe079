package index

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/kv"
)

// Source identifies the delivery that carried records: the caller has
// verified the batch (signature, sequence) before calling Put.
type Source struct {
	Node     string    // the publishing node's peer id, at most 256 bytes
	Seq      uint64    // the batch's sequence number
	Received time.Time // when the batch arrived; zero means now
}

// PutResult counts what happened to the records of one Put.
type PutResult struct {
	Added      int // pages new to the index
	Replaced   int // newer versions of stored pages
	Removed    int // gone records applied: the page is out of search, a tombstone kept
	Duplicates int // the same version (time and content) was already stored
	Stale      int // older than the stored version or tombstone: ignored
	Rejected   int // invalid records: see Errors
	Dropped    int // malformed or surplus keywords and statements removed from stored records

	// Errors holds the reasons of the first rejections (at most 8), each
	// matching ErrInvalidRecord.
	Errors []error
}

const maxResultErrors = 8

func (r *PutResult) reject(err error) {
	r.Rejected++
	if len(r.Errors) < maxResultErrors {
		r.Errors = append(r.Errors, err)
	}
}

func (r *PutResult) add(o PutResult) {
	r.Added += o.Added
	r.Replaced += o.Replaced
	r.Removed += o.Removed
	r.Duplicates += o.Duplicates
	r.Stale += o.Stale
	r.Dropped += o.Dropped
	for _, e := range o.Errors {
		r.reject(e)
	}
	r.Rejected += o.Rejected - len(o.Errors)
}

// PutBatch decodes a batch (crawl.DecodeBatch: bounded decompression, any
// corruption fails the whole batch) and stores its records with Put.
func (x *Index) PutBatch(ctx context.Context, src Source, data []byte) (PutResult, error) {
	recs, err := crawl.DecodeBatch(data)
	if err != nil {
		return PutResult{}, err
	}
	return x.Put(ctx, src, recs)
}

// Put stores records delivered by src. Storing is idempotent and ordered
// by record time, whatever the order of delivery: a record is stored unless
// a record of the same URL with a later time (or the same time and a greater
// content hash) is already there, so every indexer that received the same
// records holds the same state. A ChangeGone record takes its page out of
// search and leaves a tombstone that older records cannot overwrite.
//
// Invalid records are counted and skipped, never stored; the others are
// bounded (keywords, links, title) before storing. Each stored record is
// annotated for the profiles it matches.
//
// When Put returns a nil error, every record is durably stored (as far as
// the database's sync options make writes durable) or will never be, so the
// caller may acknowledge the batch. On an error some records may be stored;
// calling Put again with the same records is safe.
func (x *Index) Put(ctx context.Context, src Source, recs []crawl.Record) (PutResult, error) {
	var res PutResult
	if err := x.check(ctx); err != nil {
		return res, err
	}
	// Validation, encoding and term extraction run outside the lock.
	ps, err := x.cfg.prepareAll(&src, recs, &res)
	if err != nil {
		return res, err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.closed.Load() {
		return res, ErrClosed
	}
	if res.Rejected > 0 {
		// Count them even when nothing else is stored.
		if err := x.commitCounts(func(c *counts) { c.Rejected += uint64(res.Rejected) }); err != nil {
			return res, err
		}
	}
	for len(ps) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		limit := len(ps)
		for {
			n, part, err := x.putChunk(ctx, src, ps[:limit])
			if err == nil {
				res.add(part)
				ps = ps[n:]
				break
			}
			if !errors.Is(err, badger.ErrTxnTooBig) {
				return res, err
			}
			if limit == 1 {
				err := fmt.Errorf("%w: %s: too large for one transaction", ErrInvalidRecord, ps[0].rec.URL)
				res.reject(err)
				if err := x.commitCounts(func(c *counts) { c.Rejected++ }); err != nil {
					return res, err
				}
				ps = ps[1:]
				break
			}
			limit /= 2
		}
	}
	if x.log.Enabled(ctx, slog.LevelDebug) {
		x.log.Debug("records stored", "node", src.Node, "seq", src.Seq, "records", len(recs),
			"added", res.Added, "replaced", res.Replaced, "removed", res.Removed,
			"duplicates", res.Duplicates, "stale", res.Stale, "rejected", res.Rejected)
	}
	return res, nil
}

// prepareAll checks src (setting its receipt time to now if zero) and
// prepares recs; the records rejected are counted in res and left out.
func (c *config) prepareAll(src *Source, recs []crawl.Record, res *PutResult) ([]*prepared, error) {
	if len(src.Node) > maxNodeBytes {
		return nil, fmt.Errorf("%w: node id of %d bytes", ErrInvalidRecord, len(src.Node))
	}
	now := c.now()
	if src.Received.IsZero() {
		src.Received = now
	}
	src.Received = src.Received.Round(0)
	ps := make([]*prepared, 0, len(recs))
	for i := range recs {
		p := c.prepare(recs[i], now)
		if p.err != nil {
			res.reject(p.err)
			c.logger.Debug("record rejected", "node", src.Node, "seq", src.Seq, "url", recs[i].URL, "error", p.err)
			continue
		}
		res.Dropped += p.dropped
		ps = append(ps, &p)
	}
	return ps, nil
}

// commitCounts changes the counters in their own transaction.
func (x *Index) commitCounts(f func(*counts)) error {
	c := x.cnt
	f(&c)
	if err := x.db.Update(func(txn *badger.Txn) error { return txn.Set(keyCounts, c.encode()) }); err != nil {
		return err
	}
	x.mu.Lock()
	x.cnt = c
	x.mu.Unlock()
	return nil
}

// wtxn is a write transaction with the changes it will make to the
// in-memory state once committed.
type wtxn struct {
	txn         *badger.Txn
	size, count int64
	cnt         counts
	df          map[string]int64 // document frequency deltas
	pc          map[string]int64 // profile match count deltas
	imp         []impactChange   // changes of postings' impacts (impact.go)
	chg         []postingChange  // changes of postings, for the deltas of runs (blocks.go)
}

func (x *Index) newWtxn() *wtxn {
	return &wtxn{txn: x.db.NewTransaction(true), cnt: x.cnt, df: make(map[string]int64), pc: make(map[string]int64)}
}

func (w *wtxn) set(k, v []byte) error {
	w.size += int64(len(k) + len(v) + 24)
	w.count++
	return w.txn.Set(k, v)
}

func (w *wtxn) del(k []byte) error {
	w.size += int64(len(k) + 24)
	w.count++
	return w.txn.Delete(k)
}

// full reports whether the transaction has used its budget, counting the
// counter updates still to be written.
func (x *Index) full(w *wtxn) bool {
	pending := int64(len(w.df)+len(w.pc)) * 96
	return w.size+pending >= x.txnBytes || w.count+int64(len(w.df)+len(w.pc)) >= x.txnCount
}

// maxDFCache bounds the term states Index.dfCache remembers (about 64
// bytes each).
const maxDFCache = 1 << 18

// commit writes the counters, the document frequencies and the impact
// lists of the changed terms, and commits; then it publishes the new
// in-memory state and builds the impact lists of terms that reached
// config.impactMin. Called with wmu held.
func (x *Index) commit(w *wtxn) error {
	defer w.txn.Discard()
	state := make(map[string]termState, len(w.df))
	load := func(t string) (termState, error) {
		if s, ok := state[t]; ok {
			return s, nil
		}
		s, ok := x.dfCache[t]
		if !ok {
			var err error
			if s, err = getTermState(w.txn, t); err != nil {
				return s, err
			}
		}
		state[t] = s
		return s, nil
	}
	for _, c := range w.chg {
		if _, err := load(c.term); err != nil {
			return err
		}
	}
	added, err := applyDeltas(w, state)
	if err != nil {
		return err
	}
	changed := make([]string, 0, len(w.df)+len(added))
	for t, d := range w.df {
		if d != 0 {
			changed = append(changed, t)
		}
	}
	for t := range added {
		if w.df[t] == 0 {
			changed = append(changed, t)
		}
	}
	slices.Sort(changed) // a fixed order, whatever the maps'
	dfs := make([]termEntry, 0, len(changed))
	var build, pack []string
	for _, t := range changed {
		old, err := load(t)
		if err != nil {
			return err
		}
		s, err := x.updateTerm(w, t, old, w.df[t], added[t])
		if err != nil {
			return err
		}
		dfs = append(dfs, termEntry{t, s})
		if s.df >= uint64(x.cfg.impactMin) && !old.impact {
			build = append(build, t)
		}
		if s.df >= uint64(x.cfg.blockMin) && s.gen == 0 || s.gen > 0 && s.delta > x.cfg.deltaLimit(s.df) {
			pack = append(pack, t)
		}
	}
	if err := applyImpacts(w, state); err != nil {
		return err
	}
	for name, d := range w.pc {
		if d == 0 {
			continue
		}
		k := profileCountKey(name)
		old, err := getUvarint(w.txn, k)
		if err != nil {
			return err
		}
		if err := w.set(k, encodeUvarint(uint64(max(int64(old)+d, 0)))); err != nil {
			return err
		}
	}
	if err := w.set(keyCounts, w.cnt.encode()); err != nil {
		return err
	}
	if err := w.txn.Commit(); err != nil {
		return err
	}
	for _, e := range dfs {
		x.cacheTerm(e.t, e.s)
	}
	x.mu.Lock()
	x.cnt = w.cnt
	for name, d := range w.pc {
		if p := x.profiles[name]; p != nil {
			p.matches = max(p.matches+d, 0)
		}
	}
	x.mu.Unlock()
	if err := x.buildImpacts(build); err != nil {
		return err
	}
	return x.packAll(pack)
}

// termEntry is a term with its state.
type termEntry struct {
	t string
	s termState
}

// updateTerm writes the state of t after its document frequency changed
// by d and its delta got added changes; a term no page has any longer
// loses its key, its run and its delta. It returns the new state.
func (x *Index) updateTerm(w *wtxn, t string, old termState, d int64, added uint64) (termState, error) {
	v := int64(old.df) + d
	s := termState{df: uint64(max(v, 0)), impact: old.impact, gen: old.gen, delta: old.delta + added}
	k := dfKey(t)
	switch {
	case v < 0:
		return s, fmt.Errorf("%w: document frequency of %q below zero", ErrCorruptValue, t)
	case v == 0:
		w.cnt.Terms--
		if old.gen > 0 {
			if err := deleteAll(w.txn, blockTermPrefix(t)); err != nil {
				return s, err
			}
			if err := deleteAll(w.txn, deltaPrefix(t, old.gen)); err != nil {
				return s, err
			}
		}
		return termState{}, w.del(k)
	}
	if old.df == 0 {
		w.cnt.Terms++
	}
	return s, w.set(k, s.encode())
}

// cacheTerm remembers the committed state of a term (df 0: forgets it).
// Called with wmu held.
func (x *Index) cacheTerm(t string, s termState) {
	if s.df == 0 {
		delete(x.dfCache, t)
		return
	}
	if _, ok := x.dfCache[t]; !ok && len(x.dfCache) >= maxDFCache {
		clear(x.dfCache)
	}
	x.dfCache[t] = s
}

func getUvarint(txn *badger.Txn, k []byte) (uint64, error) {
	v, _, err := kv.Decode(txn, k, decodeUvarint)
	return v, err
}

// putChunk stores records from the front of ps in one transaction until
// its budget is used, and returns how many it stored. On any error nothing
// is stored.
func (x *Index) putChunk(ctx context.Context, src Source, ps []*prepared) (int, PutResult, error) {
	w := x.newWtxn()
	defer w.txn.Discard()
	var res PutResult
	n := 0
	for _, p := range ps {
		if n > 0 && (x.full(w) || ctx.Err() != nil) {
			break
		}
		if err := x.apply(w, src, p, &res); err != nil {
			return 0, PutResult{}, err
		}
		n++
	}
	w.cnt.LastIngest = src.Received
	if err := x.commit(w); err != nil {
		return 0, PutResult{}, err
	}
	return n, res, nil
}

// newer compares record versions: by time, then content hash.
func newer(t1 time.Time, h1 uint64, t2 time.Time, h2 uint64) int {
	return cmp.Or(cmp.Compare(t1.UnixNano(), t2.UnixNano()), cmp.Compare(h1, h2))
}

// apply stores one record in w.
func (x *Index) apply(w *wtxn, src Source, p *prepared, res *PutResult) error {
	txn := w.txn
	old, exists, err := getMeta(txn, p.id)
	if err != nil {
		return err
	}
	if exists && old.URL != p.rec.URL {
		// Two URLs with one 128-bit hash: refuse the newcomer.
		x.log.Warn("url hash collision", "url", p.rec.URL, "stored", old.URL)
		res.reject(fmt.Errorf("%w: %s: hash collision with %s", ErrInvalidRecord, p.rec.URL, old.URL))
		w.cnt.Rejected++
		return nil
	}
	if exists {
		switch c := newer(p.rec.Time, p.hash, old.Time, old.Hash); {
		case c == 0:
			res.Duplicates++
			w.cnt.Duplicates++
			return nil
		case c < 0:
			res.Stale++
			w.cnt.Stale++
			return nil
		}
	}
	var oldPostings []posting
	var oldAnchors map[docID]map[string]bool
	if exists && !old.Gone {
		s, err := getStored(txn, p.id)
		if err != nil {
			return err
		}
		oldPostings = s.Postings
		r, err := crawl.DecodeRecord(s.Record)
		if err != nil {
			return fmt.Errorf("%w: record %x: %v", ErrCorruptValue, p.id, err)
		}
		oldAnchors = anchorsOf(&r)
	}
	gone := p.rec.Change == crawl.ChangeGone
	// The page's postings: its own terms with the anchors of the links to
	// it merged in.
	counts, err := getAnchorCounts(txn, p.id)
	if err != nil {
		return err
	}
	top := counts.top()
	var was, now []posting // what the index held for the page, and will
	if exists && !old.Gone {
		was = withAnchors(oldPostings, top)
	}
	if !gone {
		now = withAnchors(p.postings, top)
	}
	if err := x.updatePostings(w, p.id, was, now); err != nil {
		return err
	}
	// The anchors its links give other pages.
	if err := x.updateAnchors(w, oldAnchors, anchorsOf(&p.rec)); err != nil {
		return err
	}
	if gone {
		if exists && !old.Gone {
			if err := w.del(recordKey(p.id)); err != nil {
				return err
			}
		}
	} else {
		s := stored{Postings: p.postings, Record: p.enc}
		if err := w.set(recordKey(p.id), s.encode()); err != nil {
			return err
		}
	}
	m := docMeta{Gone: gone, Time: p.rec.Time, Hash: p.hash, URL: p.rec.URL, Prov: Provenance{Node: src.Node, Seq: src.Seq, Received: src.Received}}
	if err := w.set(docKey(p.id), m.encode()); err != nil {
		return err
	}
	if err := x.annotate(w, p.id, oldPostings, p.postings); err != nil {
		return err
	}
	wasLive, wasGone := exists && !old.Gone, exists && old.Gone
	switch {
	case gone:
		res.Removed++
		w.cnt.Removed++
	case wasLive:
		res.Replaced++
		w.cnt.Replaced++
	default:
		res.Added++
		w.cnt.Added++
	}
	if wasLive {
		w.cnt.Docs--
	}
	if wasGone {
		w.cnt.Tombstones--
	}
	if gone {
		w.cnt.Tombstones++
	} else {
		w.cnt.Docs++
	}
	return nil
}

// updatePostings turns the postings of a page from old into new (both
// sorted by term).
func (x *Index) updatePostings(w *wtxn, id docID, old, new []posting) error {
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		var c int
		switch {
		case i == len(old):
			c = 1
		case j == len(new):
			c = -1
		default:
			c = strings.Compare(old[i].Term, new[j].Term)
		}
		switch {
		case c < 0: // only in old
			if err := w.del(postingKey(old[i].Term, id)); err != nil {
				return err
			}
			w.noteChange(old[i].Term, id, &old[i], nil)
			w.df[old[i].Term]--
			w.cnt.Postings--
			i++
		case c > 0: // only in new
			if err := w.set(postingKey(new[j].Term, id), encodePostingValue(new[j].Weight, new[j].Flags, new[j].Anchor)); err != nil {
				return err
			}
			w.noteChange(new[j].Term, id, nil, &new[j])
			w.df[new[j].Term]++
			w.cnt.Postings++
			j++
		default:
			if old[i] != new[j] {
				if err := w.set(postingKey(new[j].Term, id), encodePostingValue(new[j].Weight, new[j].Flags, new[j].Anchor)); err != nil {
					return err
				}
				w.noteChange(new[j].Term, id, &old[i], &new[j])
			}
			i++
			j++
		}
	}
	return nil
}
