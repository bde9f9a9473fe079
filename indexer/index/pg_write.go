package index

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgWrites collects the rows one Put writes, so that each table costs a
// round trip or two however many records the batch holds (a COPY, a
// statement over arrays, or a pipelined batch of upserts).
type pgWrites struct {
	pages []*pgPageRow

	delPostPage  []int64 // postings to delete: (page, term)
	delPostTerm  []string
	newPostings  [][]any // rows for COPY into micra.postings
	df           map[string]int64
	delAnchPage  []int64
	delAnchTerm  []string
	setAnchPage  []int64
	setAnchTerm  []string
	setAnchN     []int32
	delMatchProf []string
	delMatchPage []int64
	setMatches   [][]any          // (profile, page, relevance, terms)
	profileN     map[string]int64 // change of each profile's number of matches
}

type pgPageRow struct {
	id int64
	s  *pgState
}

func timeNS(ns int64) time.Time { return time.Unix(0, ns) }

// pgExec runs a statement that writes what, naming it in its error.
func pgExec(ctx context.Context, tx pgx.Tx, what, sql string, args ...any) error {
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

// page notes the row of a page whose state changed, and the changes of
// its anchor counts.
func (w *pgWrites) page(id int64, before, after *pgState) {
	if after.changed {
		w.pages = append(w.pages, &pgPageRow{id: id, s: after})
	}
	for _, t := range sortedKeys(before.anchors, after.anchors, strings.Compare) {
		switch n := after.anchors[t]; {
		case n == before.anchors[t]:
		case n == 0:
			w.delAnchPage, w.delAnchTerm = append(w.delAnchPage, id), append(w.delAnchTerm, t)
		default:
			w.setAnchPage, w.setAnchTerm, w.setAnchN = append(w.setAnchPage, id), append(w.setAnchTerm, t), append(w.setAnchN, int32(min(n, 1<<31-1)))
		}
	}
}

// postings notes the change of a page's postings from old to new (both
// sorted by term) and of the document frequencies and counters.
func (w *pgWrites) postings(id int64, old, new []posting, c *counts) {
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		var cmp int
		switch {
		case i == len(old):
			cmp = 1
		case j == len(new):
			cmp = -1
		default:
			cmp = strings.Compare(old[i].Term, new[j].Term)
		}
		switch {
		case cmp < 0:
			w.delPostPage, w.delPostTerm = append(w.delPostPage, id), append(w.delPostTerm, old[i].Term)
			w.df[old[i].Term]--
			c.Postings--
			i++
		case cmp > 0:
			w.newPostings = append(w.newPostings, pgPostingRow(id, &new[j]))
			w.df[new[j].Term]++
			c.Postings++
			j++
		default:
			if old[i] != new[j] {
				w.delPostPage, w.delPostTerm = append(w.delPostPage, id), append(w.delPostTerm, old[i].Term)
				w.newPostings = append(w.newPostings, pgPostingRow(id, &new[j]))
			}
			i++
			j++
		}
	}
}

func pgPostingRow(id int64, p *posting) []any {
	return []any{p.Term, id, int32(p.Weight), int16(p.Flags), int32(p.Anchor), impactOf(p.Weight, p.Flags, p.Anchor)}
}

// matches notes the change of a page's profile annotations when its own
// postings change from old to new (nil: not live).
func (w *pgWrites) matches(id int64, profiles []*profileState, old, new []posting, c *counts) {
	for _, pr := range profiles {
		var was, is float64
		var wasTerms, terms []string
		if old != nil {
			was, wasTerms = pr.relevance(old)
		}
		if new != nil {
			is, terms = pr.relevance(new)
		}
		had, has := pr.matchesRelevance(was), pr.matchesRelevance(is)
		switch {
		case has && (!had || was != is || !slices.Equal(wasTerms, terms)):
			w.setMatches = append(w.setMatches, []any{pr.Name, id, is, terms})
			if !had {
				c.Matches++
				w.profileN[pr.Name]++
			}
		case had && !has:
			w.delMatchProf, w.delMatchPage = append(w.delMatchProf, pr.Name), append(w.delMatchPage, id)
			c.Matches--
			w.profileN[pr.Name]--
		}
	}
}

// flush writes everything noted, then the document frequencies (read
// and written under the writers' lock).
func (w *pgWrites) flush(ctx context.Context, tx pgx.Tx, c *counts) error {
	if len(w.pages) > 0 {
		b := &pgx.Batch{}
		for _, r := range w.pages {
			m := &r.s.m
			var own []byte
			if !m.Gone {
				own = encodePostings(r.s.own)
			}
			h := &r.s.head
			b.Queue(`INSERT INTO micra.pages (id, url, gone, time_ns, hash, node, seq, received_ns, final_url, title, lang, postings, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (id) DO UPDATE SET url = $2, gone = $3, time_ns = $4, hash = $5, node = $6, seq = $7, received_ns = $8,
	final_url = $9, title = $10, lang = $11, postings = $12, record = $13`,
				r.id, m.URL, m.Gone, m.Time.UnixNano(), int64(m.Hash), m.Prov.Node, int64(m.Prov.Seq), m.Prov.Received.UnixNano(),
				h.FinalURL, h.Title, h.Lang, own, r.s.rec)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("writing pages: %w", err)
		}
	}
	if len(w.delAnchPage) > 0 {
		if err := pgExec(ctx, tx, "anchors", `DELETE FROM micra.anchors a USING unnest($1::bigint[], $2::text[]) d(page, term) WHERE a.page = d.page AND a.term = d.term`, w.delAnchPage, w.delAnchTerm); err != nil {
			return err
		}
	}
	if len(w.setAnchPage) > 0 {
		if err := pgExec(ctx, tx, "anchors", `INSERT INTO micra.anchors (page, term, n) SELECT * FROM unnest($1::bigint[], $2::text[], $3::integer[])
ON CONFLICT (page, term) DO UPDATE SET n = excluded.n`, w.setAnchPage, w.setAnchTerm, w.setAnchN); err != nil {
			return err
		}
	}
	if len(w.delPostPage) > 0 {
		if err := pgExec(ctx, tx, "postings", `DELETE FROM micra.postings p USING unnest($1::bigint[], $2::text[]) d(page, term) WHERE p.page = d.page AND p.term = d.term`, w.delPostPage, w.delPostTerm); err != nil {
			return err
		}
	}
	if len(w.newPostings) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"micra", "postings"}, []string{"term", "page", "weight", "flags", "anchor", "impact"},
			pgx.CopyFromRows(w.newPostings)); err != nil {
			return fmt.Errorf("writing postings: %w", err)
		}
	}
	if len(w.delMatchPage) > 0 {
		if err := pgExec(ctx, tx, "profile matches", `DELETE FROM micra.matches m USING unnest($1::text[], $2::bigint[]) d(profile, page) WHERE m.profile = d.profile AND m.page = d.page`, w.delMatchProf, w.delMatchPage); err != nil {
			return err
		}
	}
	if len(w.setMatches) > 0 {
		b := &pgx.Batch{}
		for _, m := range w.setMatches {
			b.Queue(`INSERT INTO micra.matches (profile, page, relevance, terms) VALUES ($1, $2, $3, $4)
ON CONFLICT (profile, page) DO UPDATE SET relevance = $3, terms = $4`, m...)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("writing profile matches: %w", err)
		}
	}
	var names []string
	var deltas []int64
	for _, name := range slices.Sorted(maps.Keys(w.profileN)) {
		if d := w.profileN[name]; d != 0 {
			names, deltas = append(names, name), append(deltas, d)
		}
	}
	if len(names) > 0 {
		if err := pgExec(ctx, tx, "profile match counts", `UPDATE micra.profiles p SET matches = p.matches + d.n
FROM unnest($1::text[], $2::bigint[]) d(name, n) WHERE p.name = d.name`, names, deltas); err != nil {
			return err
		}
	}
	return w.flushDF(ctx, tx, c)
}

// flushDF applies the document frequency changes: terms whose frequency
// falls to zero are deleted.
func (w *pgWrites) flushDF(ctx context.Context, tx pgx.Tx, c *counts) error {
	terms := slices.Sorted(maps.Keys(w.df))
	terms = slices.DeleteFunc(terms, func(t string) bool { return w.df[t] == 0 })
	if len(terms) == 0 {
		return nil
	}
	old := make(map[string]int64, len(terms))
	rows, err := tx.Query(ctx, `SELECT term, df FROM micra.terms WHERE term = ANY($1)`, terms)
	if err != nil {
		return err
	}
	for rows.Next() {
		var t string
		var df int64
		if err := rows.Scan(&t, &df); err != nil {
			rows.Close()
			return err
		}
		old[t] = df
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var setT, delT []string
	var setN []int64
	for _, t := range terms {
		v := old[t] + w.df[t]
		switch {
		case v < 0:
			return fmt.Errorf("%w: document frequency of %q below zero", ErrCorruptValue, t)
		case v == 0:
			delT = append(delT, t)
			c.Terms--
		default:
			if old[t] == 0 {
				c.Terms++
			}
			setT, setN = append(setT, t), append(setN, v)
		}
	}
	if len(delT) > 0 {
		if err := pgExec(ctx, tx, "document frequencies", `DELETE FROM micra.terms WHERE term = ANY($1)`, delT); err != nil {
			return err
		}
	}
	if len(setT) > 0 {
		if err := pgExec(ctx, tx, "document frequencies", `INSERT INTO micra.terms (term, df) SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (term) DO UPDATE SET df = excluded.df`, setT, setN); err != nil {
			return err
		}
	}
	return nil
}
