package index

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/micra-net/micra/crawl"
)

// Search in PostgreSQL: a query that the embedded store would run on its
// impact lists runs on impact order (pg_threshold.go); the others are one
// statement that joins the terms' postings (all words, up to four) or
// groups them by page, scores each page as Index does and keeps the best,
// the planner choosing how. That statement's work grows with the
// postings of the query's terms, bounded by the query timeout, not by a
// scan budget, and its Results.Total is exact.

// pgHit is a page found, with its score.
type pgHit struct {
	id    int64
	score float64
}

// Search: see Index.Search.
func (p *Postgres) Search(ctx context.Context, q Query) (*Results, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	pq, res, err := p.cfg.startSearch(&q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.readCtx(ctx)
	defer cancel()
	k := q.Offset + q.Limit
	err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// One lookup of the query's terms serves the split and the
		// evaluation; a split's parts cost one more.
		df := memoDFs(func(ts []string) (map[string]int64, error) { return pgTermDFs(ctx, tx, ts) })
		pq, splits, err := splitUnknown(pq, df)
		if err != nil {
			return err
		}
		res.searchedAs(pq, splits)
		e, err := p.newEval(ctx, tx, pq, df)
		if err != nil {
			return err
		}
		var top []pgHit
		if q.Any || len(e.known) == len(pq.Terms) { // else a word is on no page: nothing has them all
			if top, err = e.run(ctx, tx, q.Any, 0, k, res); err != nil {
				return err
			}
		}
		if wantsPartial(pq, q.Any, res) && len(e.known) > 0 {
			// Nothing has every word: the pages with every word some page
			// has, if some word is on no page, else those with any, each
			// score scaled by the square of its share of the words.
			if len(e.known) < len(pq.Terms) {
				top, err = e.run(ctx, tx, false, len(pq.Terms), k, res)
			}
			if err == nil && res.Total == 0 {
				top, err = e.run(ctx, tx, true, len(pq.Terms), k, res)
			}
			if err != nil {
				return err
			}
			res.Partial = res.Total > 0
		}
		if q.Offset >= len(top) {
			return nil
		}
		res.Hits, err = pgHits(ctx, tx, top[q.Offset:], pq)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// pgEval is a query with what the database knows of its terms.
type pgEval struct {
	p        *Postgres
	cfg      *config
	docs     int64
	known    []string  // the query's terms that some page has, in the query's order of terms
	idf      []float64 // theirs
	df       []int64   // theirs
	excluded []string  // the excluded terms some page has
	hidden   []string  // the distrusted nodes
	boost    float64
}

// newEval reads the counts and, through lookup, the document frequencies
// of pq's terms.
func (p *Postgres) newEval(ctx context.Context, tx pgx.Tx, pq parsedQuery, lookup func([]string) (map[string]int64, error)) (*pgEval, error) {
	c, err := pgReadCounts(ctx, tx)
	if err != nil {
		return nil, err
	}
	df, err := lookup(slices.Concat(pq.Terms, pq.Excluded))
	if err != nil {
		return nil, err
	}
	e := &pgEval{p: p, cfg: p.cfg, docs: c.Docs, hidden: p.trust.nodes(), boost: p.cfg.titleBoost}
	for _, t := range pq.Terms {
		if n := df[t]; n > 0 {
			e.known = append(e.known, t)
			e.idf = append(e.idf, idf(c.Docs, n))
			e.df = append(e.df, n)
		}
	}
	for _, t := range pq.Excluded {
		if df[t] > 0 {
			e.excluded = append(e.excluded, t)
		}
	}
	return e, nil
}

// pgTermDFs returns the document frequencies of the terms of ts that some
// page has.
func pgTermDFs(ctx context.Context, tx pgx.Tx, ts []string) (map[string]int64, error) {
	df := make(map[string]int64)
	rows, err := tx.Query(ctx, `SELECT term, df FROM micra.terms WHERE term = ANY($1) AND df > 0`, ts)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			return nil, err
		}
		df[t] = n
	}
	return df, rows.Err()
}

// run finds the k best pages with all (or with anyWord any) of the known
// terms and sets res.Total (and res.Estimated). With coord > 0, a page's
// score is scaled by the square of the share of coord terms it has.
// Queries of frequent terms read them in impact order (pgThreshold), as
// Index does; the others are one statement.
func (e *pgEval) run(ctx context.Context, tx pgx.Tx, anyWord bool, coord, k int, res *Results) ([]pgHit, error) {
	res.Total, res.Estimated = 0, false
	if len(e.known) == 0 {
		return nil, nil
	}
	qts := make([]qterm, len(e.known))
	for i := range e.known {
		qts[i] = qterm{t: e.known[i], pos: i, state: termState{df: uint64(e.df[i]), impact: true}, weight: e.idf[i]}
	}
	if budget, ok := e.cfg.plan(qts, anyWord, e.docs); ok {
		th := pgThreshold{e: e, tx: tx, anyWord: anyWord, coord: coord, budget: budget}
		top, done, err := th.run(ctx, k)
		if err != nil {
			return nil, err
		}
		e.p.impactQueries.Add(1)
		if !done {
			e.p.impactFallbacks.Add(1)
		}
		if done {
			if len(e.known) == 1 && len(e.excluded) == 0 && len(e.hidden) == 0 {
				res.Total = int(e.df[0]) // every page with the word
			} else if err := e.count(ctx, tx, anyWord, res); err != nil {
				return nil, err
			}
			res.Total = max(res.Total, th.matches)
			return top, nil
		}
	}
	sql, args := e.statement(anyWord, coord, k, nil)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	defer rows.Close()
	var top []pgHit
	for rows.Next() {
		var h pgHit
		var total int64
		if err := rows.Scan(&h.id, &h.score, &total); err != nil {
			return nil, err
		}
		top = append(top, h)
		res.Total = int(total)
	}
	return top, rows.Err()
}

// maxJoinTerms is the most terms an all-words query is a join of (one
// scan of postings per term, the planner choosing the order and the
// method); more are grouped by page.
const maxJoinTerms = 4

// statement is the SQL of an evaluation: the k best pages with their
// scores and the number of matches in every row, or with k 0 only that
// number; with below, only the pages whose key is below *below.
func (e *pgEval) statement(anyWord bool, coord, k int, below *int64) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	boost := arg(e.boost)
	// What posting p of a term of weight idf adds, with the operations
	// of termScore, so that the scores are Index's to the last bit.
	contrib := func(p, idf string) string {
		return idf + "::float8 * (CASE WHEN " + p + ".flags & 1 <> 0 THEN " + p + ".weight::float8 / 65535 * (1 + " + boost + "::float8) ELSE " +
			p + ".weight::float8 / 65535 END + " + p + ".anchor::float8 / 65535)"
	}
	var b strings.Builder
	n := len(e.known)
	if !anyWord && n <= maxJoinTerms {
		// A join: the terms' contributions added in the query's order.
		b.WriteString(`WITH m AS (SELECT p1.page, `)
		for i := range n {
			if i > 0 {
				b.WriteString(" + ")
			}
			b.WriteString(contrib(fmt.Sprintf("p%d", i+1), arg(e.idf[i])))
		}
		b.WriteString(` AS score, ` + strconv.Itoa(n) + ` AS n FROM micra.postings p1`)
		for i := 1; i < n; i++ {
			fmt.Fprintf(&b, ` JOIN micra.postings p%d ON p%d.term = %s AND p%d.page = p1.page`, i+1, i+1, arg(e.known[i]), i+1)
		}
		b.WriteString(` WHERE p1.term = ` + arg(e.known[0]))
		if below != nil {
			b.WriteString(` AND p1.page < ` + arg(*below))
		}
		b.WriteString(`)`)
	} else {
		// Grouped by page: a page has one posting per term, so each
		// term's contribution is a sum of one value, and they are added
		// in the query's order.
		b.WriteString(`WITH q(term, idf, pos) AS (SELECT * FROM unnest(` + arg(e.known) + `::text[], ` + arg(e.idf) + `::float8[]) WITH ORDINALITY),
c AS (SELECT p.page, q.pos, ` + contrib("p", "q.idf") + ` AS c FROM micra.postings p JOIN q ON p.term = q.term`)
		if below != nil {
			b.WriteString(` WHERE p.page < ` + arg(*below))
		}
		b.WriteString(`),
m AS (SELECT page, `)
		for i := range n {
			if i > 0 {
				b.WriteString(" + ")
			}
			fmt.Fprintf(&b, "coalesce(sum(c) FILTER (WHERE pos = %d), 0)", i+1)
		}
		b.WriteString(` AS score, count(*) AS n FROM c GROUP BY page`)
		if !anyWord {
			b.WriteString(` HAVING count(*) = ` + arg(n))
		}
		b.WriteString(`)`)
	}
	switch {
	case k == 0:
		b.WriteString(`
SELECT count(*) FROM m WHERE true`)
	case coord > 0:
		c := arg(float64(coord))
		b.WriteString(`
SELECT page, score * ((n::float8 / ` + c + `) * (n::float8 / ` + c + `)) AS s, count(*) OVER () FROM m WHERE true`)
	default:
		b.WriteString(`
SELECT page, score AS s, count(*) OVER () FROM m WHERE true`)
	}
	if len(e.excluded) > 0 {
		b.WriteString(` AND NOT EXISTS (SELECT 1 FROM micra.postings x WHERE x.term = ANY(` + arg(e.excluded) + `) AND x.page = m.page)`)
	}
	if len(e.hidden) > 0 {
		b.WriteString(` AND NOT EXISTS (SELECT 1 FROM micra.pages g WHERE g.id = m.page AND g.node = ANY(` + arg(e.hidden) + `))`)
	}
	if k > 0 {
		b.WriteString(` ORDER BY s DESC, page LIMIT ` + arg(k))
	}
	return b.String(), args
}

// count sets res.Total to the number of pages matching, counted exactly
// when its driving list (the rarest term's postings, or every term's for
// any word) has at most config.pgCount postings; otherwise it counts the
// pages of that share of the key space and extrapolates (keys are
// uniform hashes, as Index's estimate assumes), and sets res.Estimated.
func (e *pgEval) count(ctx context.Context, tx pgx.Tx, anyWord bool, res *Results) error {
	var size int64
	for i, df := range e.df {
		switch {
		case anyWord:
			size += df
		case i == 0 || df < size:
			size = df
		}
	}
	var below *int64
	frac := 1.0
	if size > int64(e.cfg.pgCount) {
		frac = float64(e.cfg.pgCount) / float64(size)
		b := int64(uint64(frac*(1<<64)) ^ 1<<63) // pgID's order
		below = &b
	}
	sql, args := e.statement(anyWord, 0, 0, below)
	var n int64
	if err := tx.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return fmt.Errorf("counting matches: %w", err)
	}
	res.Total = int(math.Round(float64(n) / frac))
	res.Estimated = below != nil
	return nil
}

// pgHits reads the records of the pages found.
func pgHits(ctx context.Context, tx pgx.Tx, top []pgHit, pq parsedQuery) ([]Hit, error) {
	ids := make([]int64, len(top))
	for i, h := range top {
		ids[i] = h.id
	}
	type page struct {
		rec []byte
		own []byte
		anc anchorCounts
	}
	pages := make(map[int64]*page, len(ids))
	rows, err := tx.Query(ctx, `SELECT id, record, postings FROM micra.pages WHERE id = ANY($1) AND NOT gone`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		pg := &page{anc: anchorCounts{}}
		var id int64
		if err := rows.Scan(&id, &pg.rec, &pg.own); err != nil {
			rows.Close()
			return nil, err
		}
		pages[id] = pg
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT page, term, n FROM micra.anchors WHERE page = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var t string
		var n int32
		if err := rows.Scan(&id, &t, &n); err != nil {
			rows.Close()
			return nil, err
		}
		if pg := pages[id]; pg != nil {
			pg.anc[t] = uint32(n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	hits := make([]Hit, 0, len(top))
	for _, h := range top {
		pg := pages[h.id]
		if pg == nil {
			return nil, fmt.Errorf("%w: hit %d has no live page", ErrCorruptValue, h.id)
		}
		r, err := crawl.DecodeRecord(pg.rec)
		if err != nil {
			return nil, fmt.Errorf("%w: hit %d: %v", ErrCorruptValue, h.id, err)
		}
		ps, err := decodePostings(pg.own)
		if err != nil {
			return nil, fmt.Errorf("%w: hit %d: %v", ErrCorruptValue, h.id, err)
		}
		for t := range pg.anc.top() {
			ps = append(ps, posting{Term: t, Flags: inAnchor})
		}
		hits = append(hits, newHit(&r, ps, h.score, pq))
	}
	return hits, nil
}
