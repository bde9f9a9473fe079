package index

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL store's tables live in the schema "micra". A page is
// keyed by pgID (64 bits of the hash of its URL); times are nanoseconds
// since 1970 (bigint: timestamptz keeps microseconds, and the order of a
// page's versions needs all of them); uint64 values (content hash,
// sequence number) are stored as the bigint of the same bits.
//
//	micra.schema    (version)                         one row: the schema version
//	micra.counts    the counters of Stats             one row
//	micra.pages     (id, url, gone, time_ns, hash,    one row per page, live or tombstone;
//	                 node, seq, received_ns,          the provenance of its version; for a
//	                 final_url, title, lang,          live page the record (crawl.AppendRecord
//	                 postings, record)                form) and its own postings (encoded)
//	micra.postings  (term, page, weight, flags,       a page's own terms with the anchors of
//	                 anchor, impact)                  links to it merged in, as Index keeps them,
//	                                                  and what each adds to a score per unit of
//	                                                  idf (impactOf), indexed in that order too
//	micra.terms     (term, df)                        document frequency of every term
//	micra.anchors   (page, term, n)                   linking pages per anchor term of a page
//	micra.profiles  (name, keywords, threshold,       registered profiles, with the number
//	                 updated_ns, matches)             of their matches
//	micra.matches   (profile, page, relevance,        the profiles' annotations
//	                 terms)
//
// Operators may read them with their own SQL; only micra writes them.

// pgSchemaVersion is the version this micra writes; pgMigrations[i]
// takes a schema from version i to i+1 (0: none yet).
const pgSchemaVersion = 2

// pgMigration takes a schema from one version to the next: its SQL, then
// what SQL cannot derive.
type pgMigration struct {
	sql string
	run func(ctx context.Context, tx pgx.Tx, p *Postgres) error
}

var pgMigrations = []pgMigration{
	// 0 → 1: the initial schema.
	{sql: `
CREATE SCHEMA IF NOT EXISTS micra;
CREATE TABLE micra.schema (version integer NOT NULL);
INSERT INTO micra.schema VALUES (0);
CREATE TABLE micra.counts (
	one         boolean PRIMARY KEY DEFAULT true CHECK (one),
	docs        bigint NOT NULL DEFAULT 0,
	tombstones  bigint NOT NULL DEFAULT 0,
	terms       bigint NOT NULL DEFAULT 0,
	postings    bigint NOT NULL DEFAULT 0,
	matches     bigint NOT NULL DEFAULT 0,
	added       bigint NOT NULL DEFAULT 0,
	replaced    bigint NOT NULL DEFAULT 0,
	removed     bigint NOT NULL DEFAULT 0,
	duplicates  bigint NOT NULL DEFAULT 0,
	stale       bigint NOT NULL DEFAULT 0,
	rejected    bigint NOT NULL DEFAULT 0,
	last_ingest_ns bigint NOT NULL DEFAULT 0
);
INSERT INTO micra.counts DEFAULT VALUES;
CREATE TABLE micra.pages (
	id          bigint PRIMARY KEY,
	url         text NOT NULL,
	gone        boolean NOT NULL,
	time_ns     bigint NOT NULL,
	hash        bigint NOT NULL,
	node        text NOT NULL,
	seq         bigint NOT NULL,
	received_ns bigint NOT NULL,
	final_url   text NOT NULL,
	title       text NOT NULL,
	lang        text NOT NULL,
	postings    bytea,
	record      bytea,
	CHECK (gone = (record IS NULL) AND gone = (postings IS NULL))
);
CREATE INDEX pages_node ON micra.pages (node);
CREATE TABLE micra.postings (
	term   text NOT NULL,
	page   bigint NOT NULL,
	weight integer NOT NULL,
	flags  smallint NOT NULL,
	anchor integer NOT NULL,
	impact double precision NOT NULL,
	PRIMARY KEY (term, page) INCLUDE (weight, flags, anchor)
);
CREATE INDEX postings_impact ON micra.postings (term, impact DESC, page);
-- A query's plan depends on how frequent its terms are: keep many.
ALTER TABLE micra.postings ALTER COLUMN term SET STATISTICS 1000;
CREATE TABLE micra.terms (
	term text PRIMARY KEY,
	df   bigint NOT NULL CHECK (df > 0)
);
CREATE TABLE micra.anchors (
	page bigint NOT NULL,
	term text NOT NULL,
	n    integer NOT NULL CHECK (n > 0),
	PRIMARY KEY (page, term)
);
CREATE TABLE micra.profiles (
	name       text PRIMARY KEY,
	keywords   jsonb NOT NULL,
	threshold  double precision NOT NULL,
	updated_ns bigint NOT NULL,
	matches    bigint NOT NULL DEFAULT 0
);
CREATE TABLE micra.matches (
	profile   text NOT NULL REFERENCES micra.profiles ON DELETE CASCADE,
	page      bigint NOT NULL,
	relevance double precision NOT NULL,
	terms     text[] NOT NULL,
	PRIMARY KEY (profile, page)
);
CREATE INDEX matches_rank ON micra.matches (profile, relevance DESC, page);
`},
	// 1 → 2: the verbatim terms of titles and anchors (verbatim.go).
	{run: pgAddVerbatims},
}

// Advisory lock keys ("micra" and a number): writers hold pgLockWrite for
// their transaction; schema changes hold pgLockSchema.
const (
	pgLockWrite  int64 = 0x6d69637261_0001
	pgLockSchema int64 = 0x6d69637261_0002
)

// ErrReadOnly: a read-only store was asked to write.
var ErrReadOnly = errors.New("store is read-only")

// openSchema creates or migrates the schema (under pgLockSchema, so that
// processes opening one database together do it once), or for a
// read-only store checks that it is this micra's.
func (p *Postgres) openSchema(ctx context.Context) error {
	if p.opts.ReadOnly {
		v, err := pgVersion(ctx, p.pool)
		if err != nil {
			return err
		}
		if v != pgSchemaVersion {
			return fmt.Errorf("%w: %d; a read-only store needs version %d (start a writing indexer first)", ErrSchema, v, pgSchemaVersion)
		}
		return nil
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pgLockSchema); err != nil {
			return err
		}
		v, err := pgVersion(ctx, tx)
		if err != nil {
			return err
		}
		if v > pgSchemaVersion {
			return fmt.Errorf("%w: %d; this micra reads versions up to %d (a newer micra wrote the database?)", ErrSchema, v, pgSchemaVersion)
		}
		for ; v < pgSchemaVersion; v++ {
			start := time.Now()
			m := pgMigrations[v]
			if m.sql != "" {
				if _, err := tx.Exec(ctx, m.sql); err != nil {
					return fmt.Errorf("migrating the schema from version %d: %w", v, err)
				}
			}
			if m.run != nil {
				if err := m.run(ctx, tx, p); err != nil {
					return fmt.Errorf("migrating the schema from version %d: %w", v, err)
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE micra.schema SET version = $1`, v+1); err != nil {
				return err
			}
			p.log.Info("postgres schema migrated", "from", v, "to", v+1, "took", time.Since(start).Round(time.Millisecond))
		}
		return nil
	})
}

// pgVersion returns the schema version, 0 if there is no schema.
func pgVersion(ctx context.Context, q querier) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('micra.schema') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, `SELECT version FROM micra.schema`).Scan(&v); err != nil {
		return 0, fmt.Errorf("%w: reading micra.schema: %v", ErrSchema, err)
	}
	return v, nil
}

const pgCountsColumns = `docs, tombstones, terms, postings, matches, added, replaced, removed, duplicates, stale, rejected, last_ingest_ns`

func pgReadCounts(ctx context.Context, q querier) (counts, error) {
	var c counts
	var u [6]int64
	var last int64
	err := q.QueryRow(ctx, `SELECT `+pgCountsColumns+` FROM micra.counts`).Scan(
		&c.Docs, &c.Tombstones, &c.Terms, &c.Postings, &c.Matches, &u[0], &u[1], &u[2], &u[3], &u[4], &u[5], &last)
	if err != nil {
		return c, fmt.Errorf("reading counters: %w", err)
	}
	c.Added, c.Replaced, c.Removed, c.Duplicates, c.Stale, c.Rejected = uint64(u[0]), uint64(u[1]), uint64(u[2]), uint64(u[3]), uint64(u[4]), uint64(u[5])
	if last != 0 {
		c.LastIngest = time.Unix(0, last)
	}
	return c, nil
}

func pgWriteCounts(ctx context.Context, q querier, c counts) error {
	var last int64
	if !c.LastIngest.IsZero() {
		last = c.LastIngest.UnixNano()
	}
	_, err := q.Exec(ctx, `UPDATE micra.counts SET (`+pgCountsColumns+`) = ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		c.Docs, c.Tombstones, c.Terms, c.Postings, c.Matches,
		int64(c.Added), int64(c.Replaced), int64(c.Removed), int64(c.Duplicates), int64(c.Stale), int64(c.Rejected), last)
	return err
}
