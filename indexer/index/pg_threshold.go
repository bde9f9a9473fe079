package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// The threshold algorithm on PostgreSQL: the same plan and stopping rule
// as threshold.go, in chunks. Each round reads the next chunk of every
// term's postings in impact order (the index postings_impact), looks up
// the query's postings of the pages met for the first time in one
// statement, scores them exactly as Index does, and stops when the k-th
// best page scores more than any page not met can: the sum of the bounds
// of the last impact read in each list. Its hits are the join's.

// Chunks start small (most queries stop in the first) and double.
const (
	pgFirstChunk = 256
	pgMaxChunk   = 8192
)

type pgThreshold struct {
	e       *pgEval
	tx      pgx.Tx
	anyWord bool
	coord   int
	budget  int // pages to score before the statement takes over

	matches int // pages met that match
}

// pgCursor is one term's postings in impact order.
type pgCursor struct {
	term   string
	idf    float64
	impact float64 // of the last posting read
	page   int64
	read   bool // some posting was read
	done   bool // every posting was read
}

// run returns the k best pages, or done false when it met more than
// budget pages first.
func (th *pgThreshold) run(ctx context.Context, k int) (top []pgHit, done bool, err error) {
	e := th.e
	cs := make([]*pgCursor, len(e.known))
	for i, t := range e.known {
		cs[i] = &pgCursor{term: t, idf: e.idf[i]}
	}
	met := make(map[int64]bool)
	best := &topK{k: k}
	chunk := min(pgFirstChunk, max(16, th.budget/(2*len(cs))))
	for {
		var fresh []int64
		for _, c := range cs {
			if c.done {
				continue
			}
			pages, err := th.next(ctx, c, chunk)
			if err != nil {
				return nil, false, err
			}
			for _, p := range pages {
				if !met[p] {
					met[p] = true
					fresh = append(fresh, p)
				}
			}
		}
		if len(met) > th.budget {
			return nil, false, nil
		}
		if err := th.score(ctx, fresh, best); err != nil {
			return nil, false, err
		}
		// The most a page not met yet can score: what the next posting of
		// each list adds at most. For all words, a list read whole holds
		// every page that can match: all are met. A page not met that
		// scores the bound has the last impact read in every list and, by
		// the lists' order, a greater key than the last page read in each:
		// it loses the tie to a k-th page of a key not above theirs.
		// With coord, such a page has at most the terms of the lists not
		// read whole (it would have been met in the others).
		var bound float64
		var last int64
		open := 0
		for _, c := range cs {
			if c.done {
				if !th.anyWord {
					return pgTop(best), true, nil
				}
				continue
			}
			if open == 0 || c.page > last {
				last = c.page
			}
			open++
			bound += impactBound(c.impact, c.idf, e.boost)
		}
		if open == 0 {
			return pgTop(best), true, nil
		}
		if th.coord > 0 {
			share := float64(open) / float64(th.coord)
			bound *= share * share
		}
		if len(best.h) == k {
			kth := best.h[0]
			if kth.score > bound || (kth.score == bound && pgID(kth.id) <= last) {
				return pgTop(best), true, nil
			}
		}
		chunk = min(2*chunk, pgMaxChunk)
	}
}

// next reads the next n postings of c's term in impact order.
func (th *pgThreshold) next(ctx context.Context, c *pgCursor, n int) ([]int64, error) {
	var rows pgx.Rows
	var err error
	if !c.read {
		rows, err = th.tx.Query(ctx, `SELECT page, impact FROM micra.postings WHERE term = $1 ORDER BY impact DESC, page LIMIT $2`, c.term, n)
	} else {
		// After the last posting read: a lower impact, or the same and a
		// greater page.
		rows, err = th.tx.Query(ctx, `SELECT page, impact FROM micra.postings WHERE term = $1 AND impact <= $2 AND (impact < $2 OR page > $3)
ORDER BY impact DESC, page LIMIT $4`, c.term, c.impact, c.page, n)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %q by impact: %w", c.term, err)
	}
	defer rows.Close()
	var pages []int64
	for rows.Next() {
		if err := rows.Scan(&c.page, &c.impact); err != nil {
			return nil, err
		}
		c.read = true
		pages = append(pages, c.page)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	c.done = len(pages) < n
	return pages, nil
}

// score looks up the query's postings of pages and offers the matching
// ones to best, scored as Index's evaluator scores them.
func (th *pgThreshold) score(ctx context.Context, pages []int64, best *topK) error {
	if len(pages) == 0 {
		return nil
	}
	e := th.e
	terms := append(append([]string(nil), e.known...), e.excluded...)
	rows, err := th.tx.Query(ctx, `SELECT page, term, weight, flags, anchor FROM micra.postings WHERE term = ANY($1) AND page = ANY($2)`, terms, pages)
	if err != nil {
		return fmt.Errorf("looking up postings: %w", err)
	}
	type found struct {
		ps       []posting
		excluded bool
	}
	by := make(map[int64]*found, len(pages))
	for rows.Next() {
		var page int64
		var p posting
		var w, a int32
		var fl int16
		if err := rows.Scan(&page, &p.Term, &w, &fl, &a); err != nil {
			rows.Close()
			return err
		}
		p.Weight, p.Flags, p.Anchor = uint16(w), uint8(fl), uint16(a)
		f := by[page]
		if f == nil {
			f = &found{}
			by[page] = f
		}
		if slices.Contains(e.excluded, p.Term) {
			f.excluded = true
		} else {
			f.ps = append(f.ps, p)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(e.hidden) > 0 {
		rows, err := th.tx.Query(ctx, `SELECT id FROM micra.pages WHERE id = ANY($1) AND node = ANY($2)`, pages, e.hidden)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			if f := by[id]; f != nil {
				f.excluded = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	contrib := make([]float64, len(e.known))
	for _, page := range pages {
		f := by[page]
		if f == nil || f.excluded || (!th.anyWord && len(f.ps) < len(e.known)) {
			continue
		}
		th.matches++
		clear(contrib)
		for _, p := range f.ps {
			if i := slices.Index(e.known, p.Term); i >= 0 {
				contrib[i] = termScore(e.idf[i], p.Weight, p.Flags, p.Anchor, e.boost)
			}
		}
		var s float64
		for _, v := range contrib {
			s += v
		}
		if th.coord > 0 {
			share := float64(len(f.ps)) / float64(th.coord)
			s *= share * share
		}
		best.offer(scored{id: pgDocID(page), score: s})
	}
	return nil
}

// pgDocID is a docID ordered as page keys are (its first 64 bits; pgID
// turns it back); the threshold algorithm's heap breaks ties by it.
func pgDocID(page int64) docID {
	var id docID
	binary.BigEndian.PutUint64(id[:8], uint64(page)^1<<63)
	return id
}

// pgTop turns the best pages into hits, best first.
func pgTop(best *topK) []pgHit {
	s := best.sorted()
	out := make([]pgHit, len(s))
	for i, h := range s {
		out[i] = pgHit{id: pgID(h.id), score: h.score}
	}
	return out
}
