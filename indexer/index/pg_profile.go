package index

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/micra-net/micra/crawl"
)

// Profiles in PostgreSQL. A profile change holds the writers' lock, like
// Put, and rebuilds the profile's matches in its transaction: no profile
// is ever pending, and every writer, whichever process it runs in,
// annotates its records for the profiles committed before it.

// pgLoadProfiles reads every profile, sorted by name.
func pgLoadProfiles(ctx context.Context, q querier, c *config) ([]*profileState, error) {
	rows, err := q.Query(ctx, `SELECT name, keywords, threshold, updated_ns, matches FROM micra.profiles ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("reading profiles: %w", err)
	}
	defer rows.Close()
	var out []*profileState
	for rows.Next() {
		var v profileValue
		var kws []jsonProfileKeyword
		var updated, matches int64
		if err := rows.Scan(&v.Name, &kws, &v.Threshold, &updated, &matches); err != nil {
			return nil, fmt.Errorf("reading profiles: %w", err)
		}
		v.Updated = timeNS(updated)
		for _, k := range kws {
			v.Keywords = append(v.Keywords, ProfileKeyword(k))
		}
		ps, err := c.newProfileState(v)
		if err != nil {
			return nil, fmt.Errorf("%w: profile %q: %v", ErrCorruptValue, v.Name, err)
		}
		ps.matches = matches
		out = append(out, ps)
	}
	return out, rows.Err()
}

// Profiles: see Index.Profiles.
func (p *Postgres) Profiles(ctx context.Context) ([]Profile, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := p.readCtx(ctx)
	defer cancel()
	ps, err := pgLoadProfiles(ctx, p.pool, p.cfg)
	if err != nil {
		return nil, err
	}
	out := make([]Profile, len(ps))
	for i, s := range ps {
		out[i] = s.public()
	}
	return out, nil
}

// Profile: see Index.Profile.
func (p *Postgres) Profile(ctx context.Context, name string) (Profile, error) {
	ps, err := p.Profiles(ctx)
	if err != nil {
		return Profile{}, err
	}
	i := slices.IndexFunc(ps, func(q Profile) bool { return q.Name == name })
	if i < 0 {
		return Profile{}, fmt.Errorf("%w: profile %q", ErrNotFound, name)
	}
	return ps[i], nil
}

// PutProfile: see Index.PutProfile. The matches are rebuilt in the same
// transaction, so the profile is never Pending.
func (p *Postgres) PutProfile(ctx context.Context, pr Profile) (Profile, error) {
	if err := p.check(ctx); err != nil {
		return Profile{}, err
	}
	if p.opts.ReadOnly {
		return Profile{}, ErrReadOnly
	}
	v := profileValue{Name: pr.Name, Keywords: slices.Clone(pr.Keywords), Threshold: pr.Threshold, Updated: p.cfg.now().Round(0), State: profileReady}
	ps, err := p.cfg.newProfileState(v)
	if err != nil {
		return Profile{}, err
	}
	kws := make([]jsonProfileKeyword, len(v.Keywords))
	for i, k := range v.Keywords {
		kws[i] = jsonProfileKeyword(k)
	}
	var c counts
	var nprof int
	ctx, cancel := p.writeCtx(ctx)
	defer cancel()
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockWrite); err != nil {
			return err
		}
		var err error
		if c, err = pgReadCounts(ctx, tx); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE name = $1) > 0, count(*) FROM micra.profiles`, v.Name).Scan(&exists, &nprof); err != nil {
			return err
		}
		if !exists && nprof >= p.cfg.maxProfiles {
			return fmt.Errorf("%w: at most %d", ErrTooManyProfiles, p.cfg.maxProfiles)
		}
		if !exists {
			nprof++
		}
		tag, err := tx.Exec(ctx, `DELETE FROM micra.matches WHERE profile = $1`, v.Name)
		if err != nil {
			return err
		}
		c.Matches -= tag.RowsAffected()
		if _, err := tx.Exec(ctx, `INSERT INTO micra.profiles (name, keywords, threshold, updated_ns) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET keywords = $2, threshold = $3, updated_ns = $4`, v.Name, kws, v.Threshold, v.Updated.UnixNano()); err != nil {
			return err
		}
		n, err := p.rebuild(ctx, tx, ps)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE micra.profiles SET matches = $2 WHERE name = $1`, v.Name, n); err != nil {
			return err
		}
		ps.matches = n
		c.Matches += n
		return pgWriteCounts(ctx, tx, c)
	})
	if err != nil {
		return Profile{}, err
	}
	p.setStats(c, nprof)
	p.log.Info("profile registered", "profile", ps.Name, "terms", len(ps.terms), "matches", ps.matches)
	return ps.public(), nil
}

// rebuild matches a profile against every live page with one of its terms
// among its own and writes the matches; it returns their number.
func (p *Postgres) rebuild(ctx context.Context, tx pgx.Tx, ps *profileState) (int64, error) {
	terms := make([]string, len(ps.terms))
	for i, t := range ps.terms {
		terms[i] = t.Term
	}
	rows, err := tx.Query(ctx, `SELECT id, postings FROM micra.pages
WHERE id IN (SELECT page FROM micra.postings WHERE term = ANY($1) AND flags <> 0) AND NOT gone`, terms)
	if err != nil {
		return 0, err
	}
	var ms [][]any
	for rows.Next() {
		var id int64
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			rows.Close()
			return 0, err
		}
		own, err := decodePostings(b)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("%w: postings of page %d: %v", ErrCorruptValue, id, err)
		}
		if rel, ts := ps.relevance(own); ps.matchesRelevance(rel) {
			ms = append(ms, []any{ps.Name, id, rel, ts})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"micra", "matches"}, []string{"profile", "page", "relevance", "terms"}, pgx.CopyFromRows(ms)); err != nil {
		return 0, err
	}
	return int64(len(ms)), nil
}

// DeleteProfile: see Index.DeleteProfile.
func (p *Postgres) DeleteProfile(ctx context.Context, name string) error {
	if err := p.check(ctx); err != nil {
		return err
	}
	if p.opts.ReadOnly {
		return ErrReadOnly
	}
	var c counts
	var nprof int
	ctx, cancel := p.writeCtx(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockWrite); err != nil {
			return err
		}
		var err error
		if c, err = pgReadCounts(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM micra.matches WHERE profile = $1`, name)
		if err != nil {
			return err
		}
		c.Matches -= tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `DELETE FROM micra.profiles WHERE name = $1`, name); err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: profile %q", ErrNotFound, name)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM micra.profiles`).Scan(&nprof); err != nil {
			return err
		}
		return pgWriteCounts(ctx, tx, c)
	})
	if err != nil {
		return err
	}
	p.setStats(c, nprof)
	p.log.Info("profile deleted", "profile", name)
	return nil
}

// Matches: see Index.Matches.
func (p *Postgres) Matches(ctx context.Context, name string, limit, offset int) (*MatchPage, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	limit, err := p.cfg.matchesWindow(limit, offset)
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.readCtx(ctx)
	defer cancel()
	page := &MatchPage{Profile: name, Offset: offset, Limit: limit, Matches: []Match{}}
	err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT matches FROM micra.profiles WHERE name = $1`, name).Scan(&page.Total)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: profile %q", ErrNotFound, name)
		}
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT m.relevance, m.terms, g.record FROM micra.matches m JOIN micra.pages g ON g.id = m.page
WHERE m.profile = $1 ORDER BY m.relevance DESC, m.page LIMIT $2 OFFSET $3`, name, limit, offset)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var rel float64
			var terms []string
			var rec []byte
			if err := rows.Scan(&rel, &terms, &rec); err != nil {
				return err
			}
			r, err := crawl.DecodeRecord(rec)
			if err != nil {
				return fmt.Errorf("%w: match of %q: %v", ErrCorruptValue, name, err)
			}
			h := newHit(&r, nil, 0, parsedQuery{})
			h.Matched = nil
			page.Matches = append(page.Matches, Match{Hit: h, Relevance: rel, Terms: terms})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}
