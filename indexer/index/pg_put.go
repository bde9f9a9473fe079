package index

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/micra-net/micra/crawl"
)

// Storing in PostgreSQL. One Put is one transaction holding pgLockWrite,
// so no other writer changes anything it reads. It reads the state of the
// pages its records touch, applies the records in memory one after the
// other exactly as Index.apply does (versions, tombstones, anchor counts
// in delivery order), then writes the difference: a page's postings are
// always its own postings with its anchor counts' top terms merged in
// (withAnchors), so the postings to write follow from each touched page's
// state before and after.

// pgState is what the transaction knows of one page.
type pgState struct {
	exists bool
	m      docMeta
	own    []posting // own postings of a live page
	rec    []byte    // its encoded record
	// head has the final URL, title and language of a version stored
	// here, for the row's columns.
	head crawl.Record
	// anchors are the page's anchor counts; nil until loaded.
	anchors anchorCounts

	changed bool // the page's row must be written
}

// live reports whether the page is in search.
func (s *pgState) live() bool { return s.exists && !s.m.Gone }

// postings returns what micra.postings holds for the page in this state.
func (s *pgState) postings() []posting {
	if !s.live() {
		return nil
	}
	return withAnchors(s.own, s.anchors.top())
}

// PutBatch: see Index.PutBatch.
func (p *Postgres) PutBatch(ctx context.Context, src Source, data []byte) (PutResult, error) {
	recs, err := crawl.DecodeBatch(data)
	if err != nil {
		return PutResult{}, err
	}
	return p.Put(ctx, src, recs)
}

// Put: see Index.Put. The records are stored in one transaction, all or
// none of them; when it returns nil they are committed.
func (p *Postgres) Put(ctx context.Context, src Source, recs []crawl.Record) (PutResult, error) {
	var res PutResult
	if err := p.check(ctx); err != nil {
		return res, err
	}
	if p.opts.ReadOnly {
		return res, ErrReadOnly
	}
	ps, err := p.cfg.prepareAll(&src, recs, &res)
	if err != nil {
		return res, err
	}
	var c counts
	var nprof int
	ctx, cancel := p.writeCtx(ctx)
	defer cancel()
	rejected := res // what an aborted transaction leaves to report
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		c, nprof, err = p.putTx(ctx, tx, src, ps, &res)
		return err
	})
	if err != nil {
		return rejected, fmt.Errorf("postgres store: storing %d records: %w", len(recs), err)
	}
	p.setStats(c, nprof)
	if p.log.Enabled(ctx, slog.LevelDebug) {
		p.log.Debug("records stored", "node", src.Node, "seq", src.Seq, "records", len(recs),
			"added", res.Added, "replaced", res.Replaced, "removed", res.Removed,
			"duplicates", res.Duplicates, "stale", res.Stale, "rejected", res.Rejected)
	}
	return res, nil
}

// pgApplied is a record that changes its page: the anchors its page's
// old and new versions give.
type pgApplied struct {
	oldAnchors, newAnchors map[docID]map[string]bool
}

// putTx stores ps in tx and returns the new counters and the number of
// profiles.
func (p *Postgres) putTx(ctx context.Context, tx pgx.Tx, src Source, ps []*prepared, res *PutResult) (counts, int, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockWrite); err != nil {
		return counts{}, 0, err
	}
	c, err := pgReadCounts(ctx, tx)
	if err != nil {
		return c, 0, err
	}
	profiles, err := pgLoadProfiles(ctx, tx, p.cfg)
	if err != nil {
		return c, 0, err
	}
	c.Rejected += uint64(res.Rejected)
	if len(ps) == 0 {
		return c, len(profiles), pgWriteCounts(ctx, tx, c)
	}
	// The pages of the records, as stored.
	states := make(map[int64]*pgState)
	var ids []int64
	for _, pr := range ps {
		if id := pgID(pr.id); states[id] == nil {
			states[id] = &pgState{}
			ids = append(ids, id)
		}
	}
	if err := pgLoadPages(ctx, tx, ids, states); err != nil {
		return c, 0, err
	}
	initial := make(map[int64]*pgState, len(states))
	for id, s := range states {
		snap := *s
		initial[id] = &snap
	}
	// Versions, in delivery order.
	var applied []pgApplied
	for _, pr := range ps {
		s := states[pgID(pr.id)]
		if s.exists && s.m.URL != pr.rec.URL {
			p.log.Warn("url hash collision", "url", pr.rec.URL, "stored", s.m.URL)
			res.reject(fmt.Errorf("%w: %s: hash collision with %s", ErrInvalidRecord, pr.rec.URL, s.m.URL))
			c.Rejected++
			continue
		}
		if s.exists {
			switch v := newer(pr.rec.Time, pr.hash, s.m.Time, s.m.Hash); {
			case v == 0:
				res.Duplicates++
				c.Duplicates++
				continue
			case v < 0:
				res.Stale++
				c.Stale++
				continue
			}
		}
		var a pgApplied
		if s.live() {
			r, err := crawl.DecodeRecord(s.rec)
			if err != nil {
				return c, 0, fmt.Errorf("%w: record of %s: %v", ErrCorruptValue, s.m.URL, err)
			}
			a.oldAnchors = anchorsOf(&r)
		}
		gone := pr.rec.Change == crawl.ChangeGone
		wasLive, wasGone := s.live(), s.exists && s.m.Gone
		switch {
		case gone:
			res.Removed++
			c.Removed++
		case wasLive:
			res.Replaced++
			c.Replaced++
		default:
			res.Added++
			c.Added++
		}
		if wasLive {
			c.Docs--
		}
		if wasGone {
			c.Tombstones--
		}
		if gone {
			c.Tombstones++
			s.own, s.rec = nil, nil
		} else {
			c.Docs++
			a.newAnchors = anchorsOf(&pr.rec)
			s.own, s.rec = pr.postings, pr.enc
		}
		s.exists, s.changed = true, true
		s.head = crawl.Record{FinalURL: pr.rec.FinalURL, Title: pr.rec.Title, Lang: pr.rec.Lang}
		s.m = docMeta{Gone: gone, Time: pr.rec.Time, Hash: pr.hash, URL: pr.rec.URL, Prov: Provenance{Node: src.Node, Seq: src.Seq, Received: src.Received}}
		applied = append(applied, a)
	}
	c.LastIngest = src.Received
	if err := pgApply(ctx, tx, states, initial, applied, profiles, &c); err != nil {
		return c, 0, err
	}
	return c, len(profiles), pgWriteCounts(ctx, tx, c)
}

// pgApply writes what applied records changed: the anchor counts of the
// pages they link to (loading those pages), and for every page of states
// the difference between its initial state and its state now (rows,
// postings, profile matches), counted in c.
func pgApply(ctx context.Context, tx pgx.Tx, states, initial map[int64]*pgState, applied []pgApplied, profiles []*profileState, c *counts) error {
	// Anchor counts of the records' pages and of the pages they link to.
	var more []int64
	for _, a := range applied {
		for _, m := range []map[docID]map[string]bool{a.oldAnchors, a.newAnchors} {
			for t := range m {
				if id := pgID(t); states[id] == nil {
					states[id] = &pgState{}
					more = append(more, id)
				}
			}
		}
	}
	if err := pgLoadPages(ctx, tx, more, states); err != nil {
		return err
	}
	for _, id := range more {
		snap := *states[id]
		initial[id] = &snap
	}
	all := slices.Sorted(maps.Keys(states))
	if err := pgLoadAnchors(ctx, tx, all, states); err != nil {
		return err
	}
	for id, s := range states {
		initial[id].anchors = maps.Clone(s.anchors)
	}
	for _, a := range applied {
		pgUpdateAnchors(states, a.oldAnchors, a.newAnchors)
	}
	w := pgWrites{df: make(map[string]int64), profileN: make(map[string]int64)}
	for _, id := range all {
		before, after := initial[id], states[id]
		w.page(id, before, after)
		w.postings(id, before.postings(), after.postings(), c)
		if after.changed && (before.live() || after.live()) { // its own postings may have changed
			w.matches(id, profiles, before.own, after.own, c)
		}
	}
	return w.flush(ctx, tx, c)
}

// pgUpdateAnchors is Index.updateAnchors on the pages in memory: the
// counts of the pages a record's links point to change from what its old
// version gave to what its new one gives.
func pgUpdateAnchors(states map[int64]*pgState, old, new map[docID]map[string]bool) {
	for _, id := range sortedKeys(old, new, func(a, b docID) int { return strings.Compare(string(a[:]), string(b[:])) }) {
		o, n := old[id], new[id]
		if maps.Equal(o, n) {
			continue
		}
		states[pgID(id)].anchors.change(o, n)
	}
}

// pgLoadPages reads the states of the pages ids into states.
func pgLoadPages(ctx context.Context, tx pgx.Tx, ids []int64, states map[int64]*pgState) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT id, url, gone, time_ns, hash, node, seq, received_ns, postings, record FROM micra.pages WHERE id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, tns, hash, seq, rns int64
		var m docMeta
		var own, rec []byte
		if err := rows.Scan(&id, &m.URL, &m.Gone, &tns, &hash, &m.Prov.Node, &seq, &rns, &own, &rec); err != nil {
			return err
		}
		m.Time, m.Hash, m.Prov.Seq, m.Prov.Received = timeNS(tns), uint64(hash), uint64(seq), timeNS(rns)
		s := states[id]
		s.exists, s.m, s.rec = true, m, rec
		if !m.Gone {
			if s.own, err = decodePostings(own); err != nil {
				return fmt.Errorf("%w: postings of %s: %v", ErrCorruptValue, m.URL, err)
			}
		}
	}
	return rows.Err()
}

// pgLoadAnchors reads the anchor counts of the pages ids.
func pgLoadAnchors(ctx context.Context, tx pgx.Tx, ids []int64, states map[int64]*pgState) error {
	for _, id := range ids {
		states[id].anchors = anchorCounts{}
	}
	rows, err := tx.Query(ctx, `SELECT page, term, n FROM micra.anchors WHERE page = ANY($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var t string
		var n int32
		if err := rows.Scan(&id, &t, &n); err != nil {
			return err
		}
		states[id].anchors[t] = uint32(n)
	}
	return rows.Err()
}

// pgMigrateBatch is how many pages pgAddVerbatims reads at once (a
// variable for tests).
var pgMigrateBatch = 512

// pgAddVerbatims adds the verbatim terms (verbatim.go) of every stored
// record, as Index.migrate4to5 does: those of its title to its own
// postings, those of its links' anchors to the counts of the pages they
// point to. It runs in the schema's migration transaction, so a crash
// leaves the schema as it was and the next start migrates again.
func pgAddVerbatims(ctx context.Context, tx pgx.Tx, p *Postgres) error {
	c, err := pgReadCounts(ctx, tx)
	if err != nil {
		return err
	}
	profiles, err := pgLoadProfiles(ctx, tx, p.cfg)
	if err != nil {
		return err
	}
	var after int64 = math.MinInt64
	for first := true; ; first = false {
		rows, err := tx.Query(ctx, `SELECT id FROM micra.pages WHERE NOT gone AND (id > $1 OR $3) ORDER BY id LIMIT $2`, after, pgMigrateBatch, first)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			break
		}
		after = ids[len(ids)-1]
		states := make(map[int64]*pgState, len(ids))
		for _, id := range ids {
			states[id] = &pgState{}
		}
		if err := pgLoadPages(ctx, tx, ids, states); err != nil {
			return err
		}
		initial := make(map[int64]*pgState, len(states))
		for id, s := range states {
			snap := *s
			initial[id] = &snap
		}
		applied := make([]pgApplied, 0, len(ids))
		for _, id := range ids {
			s := states[id]
			r, err := crawl.DecodeRecord(s.rec)
			if err != nil {
				return fmt.Errorf("%w: record of %s: %v", ErrCorruptValue, s.m.URL, err)
			}
			all := anchorsOf(&r)
			applied = append(applied, pgApplied{oldAnchors: stemAnchors(all), newAnchors: all})
			s.own, s.changed = indexTerms(&r), true
			s.head = crawl.Record{FinalURL: r.FinalURL, Title: r.Title, Lang: r.Lang}
		}
		if err := pgApply(ctx, tx, states, initial, applied, profiles, &c); err != nil {
			return err
		}
	}
	return pgWriteCounts(ctx, tx, c)
}
