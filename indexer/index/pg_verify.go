package index

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Verify: see Index.Verify. It reads the pages, the postings and the
// matches in three sorted streams, on three connections sharing one
// snapshot (pg_export_snapshot), and checks that every page's postings are
// its own with its anchors merged in, its matches those its own postings
// give, and the counters and document frequencies what the tables hold.
func (p *Postgres) Verify(ctx context.Context) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	if p.pool.Config().MaxConns < 3 {
		return errors.New("postgres store: Verify needs a pool of at least 3 connections")
	}
	var txs [3]pgx.Tx
	for i := range txs {
		conn, err := p.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		txs[i] = tx
	}
	var snap string
	if err := txs[0].QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snap); err != nil {
		return err
	}
	for _, tx := range txs[1:] {
		if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snap+`'`); err != nil { // a server-made identifier; SET takes no parameters
			return err
		}
	}
	v := pgVerifier{ctx: ctx, txs: txs, cfg: p.cfg}
	if err := v.tables(); err != nil {
		return err
	}
	if err := v.pages(); err != nil {
		return err
	}
	return errors.Join(v.errs...)
}

// pgVerifier is one run of Postgres.Verify on its three transactions.
type pgVerifier struct {
	ctx  context.Context
	txs  [3]pgx.Tx
	cfg  *config
	errs []error // the first twenty problems found
}

func (v *pgVerifier) fail(format string, a ...any) {
	if len(v.errs) < 20 {
		v.errs = append(v.errs, fmt.Errorf(format, a...))
	}
}

// tables checks the counters, the document frequencies and the profiles'
// numbers of matches, in SQL.
func (v *pgVerifier) tables() error {
	ctx, tx := v.ctx, v.txs[0]
	want, err := pgReadCounts(ctx, tx)
	if err != nil {
		return err
	}
	var got counts
	var badDF int64
	err = tx.QueryRow(ctx, `SELECT
	(SELECT count(*) FROM micra.pages WHERE NOT gone), (SELECT count(*) FROM micra.pages WHERE gone),
	(SELECT count(*) FROM micra.terms), (SELECT count(*) FROM micra.postings), (SELECT count(*) FROM micra.matches),
	(SELECT count(*) FROM (SELECT term, count(*) AS n FROM micra.postings GROUP BY term) a FULL JOIN micra.terms t USING (term) WHERE a.n IS DISTINCT FROM t.df)`).
		Scan(&got.Docs, &got.Tombstones, &got.Terms, &got.Postings, &got.Matches, &badDF)
	if err != nil {
		return err
	}
	if got.Docs != want.Docs || got.Tombstones != want.Tombstones || got.Terms != want.Terms || got.Postings != want.Postings || got.Matches != want.Matches {
		v.fail("counters %+v, tables hold docs %d tombstones %d terms %d postings %d matches %d",
			want, got.Docs, got.Tombstones, got.Terms, got.Postings, got.Matches)
	}
	if badDF > 0 {
		v.fail("%d terms whose document frequency is not their number of postings", badDF)
	}
	var badProfiles int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM micra.profiles p
WHERE p.matches <> (SELECT count(*) FROM micra.matches m WHERE m.profile = p.name)`).Scan(&badProfiles); err != nil {
		return err
	}
	if badProfiles > 0 {
		v.fail("%d profiles whose number of matches is not their matches'", badProfiles)
	}
	return nil
}

// pages walks the pages in id order beside the postings' and the matches'
// streams, checking each page's rows against what its record gives.
func (v *pgVerifier) pages() error {
	ctx := v.ctx
	profiles, err := pgLoadProfiles(ctx, v.txs[0], v.cfg)
	if err != nil {
		return err
	}
	pages, err := v.txs[0].Query(ctx, `SELECT g.id, g.url, g.gone, g.postings,
	coalesce((SELECT array_agg(a.term) FROM micra.anchors a WHERE a.page = g.id), '{}'),
	coalesce((SELECT array_agg(a.n) FROM micra.anchors a WHERE a.page = g.id), '{}')
FROM micra.pages g ORDER BY g.id`)
	if err != nil {
		return err
	}
	defer pages.Close()
	post, err := newPgStream(ctx, v.txs[1], `SELECT page, term, weight, flags, anchor, impact FROM micra.postings ORDER BY page, term`)
	if err != nil {
		return err
	}
	defer post.rows.Close()
	match, err := newPgStream(ctx, v.txs[2], `SELECT page, profile, relevance FROM micra.matches ORDER BY page, profile`)
	if err != nil {
		return err
	}
	defer match.rows.Close()
	for pages.Next() {
		var id int64
		var u string
		var gone bool
		var own []byte
		var aterms []string
		var an []int32
		if err := pages.Scan(&id, &u, &gone, &own, &aterms, &an); err != nil {
			return err
		}
		wantPost, wantMatch, err := pgExpected(gone, own, aterms, an, profiles)
		if err != nil {
			v.fail("page %s: %v", u, err)
			continue
		}
		gotPost, err := post.postingsOf(id)
		if err != nil {
			return err
		}
		if !slices.Equal(gotPost, wantPost) {
			v.fail("page %s: postings %v, want %v", u, gotPost, wantPost)
		}
		gotMatch, err := match.matchesOf(id)
		if err != nil {
			return err
		}
		if !slices.Equal(gotMatch, wantMatch) {
			v.fail("page %s: matches %v, want %v", u, gotMatch, wantMatch)
		}
	}
	if err := pages.Err(); err != nil {
		return err
	}
	if post.ok || match.ok || post.orphans > 0 || match.orphans > 0 {
		v.fail("postings or matches of pages that do not exist")
	}
	if post.badImpacts > 0 {
		v.fail("%d postings with a wrong impact", post.badImpacts)
	}
	return nil
}

// pgExpected is what a page row's own postings and anchor counts give:
// its postings with the anchors merged in, and its matches.
func pgExpected(gone bool, own []byte, aterms []string, an []int32, profiles []*profileState) ([]posting, []pgMatchRow, error) {
	if gone {
		return nil, nil, nil
	}
	ps, err := decodePostings(own)
	if err != nil {
		return nil, nil, err
	}
	a := anchorCounts{}
	for i, t := range aterms {
		a[t] = uint32(an[i])
	}
	var matches []pgMatchRow
	for _, pr := range profiles {
		if rel, _ := pr.relevance(ps); pr.matchesRelevance(rel) {
			matches = append(matches, pgMatchRow{pr.Name, rel})
		}
	}
	return withAnchors(ps, a.top()), matches, nil
}

type pgMatchRow struct {
	profile   string
	relevance float64
}

// pgStream is a query whose rows start with a page id, read ahead by one.
type pgStream struct {
	rows       pgx.Rows
	ok         bool
	page       int64
	orphans    int // rows of pages that have no page row
	badImpacts int // postings whose impact is not impactOf theirs
	post       posting
	mr         pgMatchRow
}

func newPgStream(ctx context.Context, tx pgx.Tx, sql string) (*pgStream, error) {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	s := &pgStream{rows: rows}
	return s, s.next()
}

func (s *pgStream) next() error {
	s.ok = s.rows.Next()
	if !s.ok {
		return s.rows.Err()
	}
	vals, err := s.rows.Values()
	if err != nil {
		return err
	}
	s.page = vals[0].(int64)
	switch len(vals) {
	case 6:
		s.post = posting{Term: vals[1].(string), Weight: uint16(vals[2].(int32)), Flags: uint8(vals[3].(int16)), Anchor: uint16(vals[4].(int32))}
		if vals[5].(float64) != impactOf(s.post.Weight, s.post.Flags, s.post.Anchor) {
			s.badImpacts++
		}
	case 3:
		s.mr = pgMatchRow{vals[1].(string), vals[2].(float64)}
	}
	return nil
}

// postingsOf returns the postings of page id (the stream is at it or
// past it) and skips those of lower pages, which have no page row.
func (s *pgStream) postingsOf(id int64) ([]posting, error) {
	var out []posting
	for s.ok && s.page <= id {
		if s.page == id {
			out = append(out, s.post)
		} else {
			s.orphans++
		}
		if err := s.next(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *pgStream) matchesOf(id int64) ([]pgMatchRow, error) {
	var out []pgMatchRow
	for s.ok && s.page <= id {
		if s.page == id {
			out = append(out, s.mr)
		} else {
			s.orphans++
		}
		if err := s.next(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
