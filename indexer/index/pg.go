package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/micra-net/micra/crawl"
)

// Postgres is the PostgreSQL store: the semantics of Index (see Store) in
// tables an operator can query, replicate and back up (pg_schema.go shows
// them). Several processes may open one database: writes (Put, profile
// changes) take one transaction-scoped advisory lock, so they run one at a
// time across all of them, and each batch is one transaction; reads are
// plain MVCC snapshots and never wait for writers. A process opened with
// ReadOnly only reads.
//
// Ranking is the embedded store's: the same postings (own weights, title
// flag, anchor weights) and document frequencies, each term's contribution
// computed in SQL with the same floating-point operations on the idf Go
// computed, added in the same order: the same scores, to the last bit.
//
// Unlike Index, its queries have no scan budget: a query that would read
// too much is stopped by PostgresOptions.QueryTimeout, and its
// Results.Total is exact unless it ran on impact order (pg_threshold.go),
// where it is estimated as Index estimates it.
type Postgres struct {
	pool *pgxpool.Pool
	cfg  *config
	log  *slog.Logger
	opts PostgresOptions

	closed    atomic.Bool
	closeOnce sync.Once
	trust     trust

	impactQueries, impactFallbacks atomic.Uint64 // see Stats

	statsMu sync.Mutex
	stats   Stats
	statsAt time.Time
}

// PostgresOptions are the settings of a PostgreSQL store beyond the
// Options both stores share.
type PostgresOptions struct {
	// ReadOnly opens a store that serves search, records, profiles and
	// export but refuses Put and profile changes with ErrReadOnly. It
	// creates and migrates nothing: the schema must be this micra's.
	ReadOnly bool
	// QueryTimeout bounds one search or read; 0 means 10 s.
	QueryTimeout time.Duration
	// WriteTimeout bounds one Put or profile change, waiting for other
	// writers included; 0 means 2 min.
	WriteTimeout time.Duration
	// MaxConns bounds the connection pool; 0 means 4 (or the DSN's
	// pool_max_conns).
	MaxConns int32
}

var _ Store = (*Postgres)(nil)

// OpenPostgres connects to the PostgreSQL database dsn names (a URL such
// as postgres://micra@db.example/micra or libpq keyword/value pairs),
// creates micra's schema in it or migrates an older one, and returns the
// store. It fails with a clear error when the server cannot be reached
// within ctx (or 10 s without a deadline), refuses the login, or holds a
// schema written by a newer micra (ErrSchema).
func OpenPostgres(ctx context.Context, dsn string, po PostgresOptions, opts ...Option) (*Postgres, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if po.QueryTimeout == 0 {
		po.QueryTimeout = 10 * time.Second
	}
	if po.WriteTimeout == 0 {
		po.WriteTimeout = 2 * time.Minute
	}
	if po.QueryTimeout < 0 || po.WriteTimeout < 0 || po.MaxConns < 0 {
		return nil, errors.New("postgres store: negative timeout or pool size")
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres store: bad connection string: %w", err)
	}
	if po.MaxConns > 0 {
		pc.MaxConns = po.MaxConns
	} else if !strings.Contains(dsn, "pool_max_conns") {
		pc.MaxConns = 4
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "micra indexer"
	// pgx prepares each statement once per connection; a generic plan,
	// which PostgreSQL switches to after five runs, cannot see how
	// frequent a query's terms are, and joins a rare word with a frequent
	// one by reading the frequent one whole.
	pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	where := fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pc.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: cannot connect: %w", where, err)
	}
	p := &Postgres{pool: pool, cfg: cfg, log: cfg.logger, opts: po}
	if err := p.openSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	st, err := p.readStats(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: %w", where, err)
	}
	p.stats, p.statsAt = st, time.Now()
	p.log.Info("postgres store opened", "server", where, "docs", st.Docs, "terms", st.Terms, "profiles", st.Profiles, "read_only", po.ReadOnly)
	return p, nil
}

// Close stops the store: it waits for the statements in progress and
// closes the connections. Later calls fail with ErrClosed. Safe to call
// more than once.
func (p *Postgres) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.pool.Close()
		p.log.Info("postgres store closed")
	})
	return nil
}

func (p *Postgres) settings() *config { return p.cfg }

func (p *Postgres) check(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// readCtx bounds a read by the query timeout, writeCtx a write by the
// write timeout.
func (p *Postgres) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.opts.QueryTimeout)
}

func (p *Postgres) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.opts.WriteTimeout)
}

// Distrust: see Index.Distrust. The set is this process's: each indexer
// decides whom it distrusts.
func (p *Postgres) Distrust(nodes ...string) { p.trust.set(nodes) }

// statsTTL is how long Stats serves counters it read before it reads them
// again: other processes change them.
const statsTTL = time.Second

// Stats returns the counters, read from the database at most once a
// second (within 2 s; on an error the last ones read), and this process's
// queries on impact order (pg_threshold.go).
func (p *Postgres) Stats() Stats {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	if time.Since(p.statsAt) >= statsTTL && !p.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := p.readStats(ctx)
		cancel()
		if err != nil {
			p.log.Warn("reading counters", "error", err)
		} else {
			p.stats, p.statsAt = st, time.Now()
		}
	}
	st := p.stats
	st.ImpactQueries, st.ImpactFallbacks = p.impactQueries.Load(), p.impactFallbacks.Load()
	return st
}

// setStats publishes counters a write just committed.
func (p *Postgres) setStats(c counts, profiles int) {
	p.statsMu.Lock()
	defer p.statsMu.Unlock()
	p.stats = c.stats(profiles)
	p.statsAt = time.Now()
}

func (c counts) stats(profiles int) Stats {
	return Stats{
		Docs: c.Docs, Tombstones: c.Tombstones, Terms: c.Terms, Postings: c.Postings,
		Profiles: profiles, Matches: c.Matches,
		Added: c.Added, Replaced: c.Replaced, Removed: c.Removed, Duplicates: c.Duplicates,
		Stale: c.Stale, Rejected: c.Rejected, LastIngest: c.LastIngest,
	}
}

func (p *Postgres) readStats(ctx context.Context) (Stats, error) {
	c, err := pgReadCounts(ctx, p.pool)
	if err != nil {
		return Stats{}, err
	}
	var n int
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM micra.profiles`).Scan(&n); err != nil {
		return Stats{}, fmt.Errorf("counting profiles: %w", err)
	}
	return c.stats(n), nil
}

// Bytes returns what the store's tables and their indexes take on disk.
func (p *Postgres) Bytes(ctx context.Context) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = 'micra' AND c.relkind = 'r'`).Scan(&n)
	return n, err
}

// Analyze updates the planner's statistics of the store's tables, which
// autovacuum does in its own time: for a benchmark right after a bulk
// load.
func (p *Postgres) Analyze(ctx context.Context) error {
	if p.opts.ReadOnly {
		return ErrReadOnly
	}
	_, err := p.pool.Exec(ctx, `ANALYZE micra.pages, micra.postings, micra.terms, micra.anchors`)
	return err
}

// Get: see Index.Get.
func (p *Postgres) Get(ctx context.Context, u string) (Doc, error) {
	if err := p.check(ctx); err != nil {
		return Doc{}, err
	}
	ctx, cancel := p.readCtx(ctx)
	defer cancel()
	var d Doc
	m, rec, err := pgPage(ctx, p.pool, pgID(idOf(u)))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("%w: %s", ErrNotFound, u)
	case err != nil:
		return d, err
	case m.URL != u:
		return d, fmt.Errorf("%w: %s", ErrNotFound, u)
	case m.Gone:
		d = Doc{Record: crawl.Record{URL: m.URL, FinalURL: m.URL, Time: m.Time, Change: crawl.ChangeGone}, Provenance: m.Prov}
		return d, fmt.Errorf("%w: %s", ErrGone, u)
	}
	r, err := crawl.DecodeRecord(rec)
	if err != nil {
		return d, fmt.Errorf("%w: record of %s: %v", ErrCorruptValue, u, err)
	}
	return Doc{Record: r, Provenance: m.Prov, Distrusted: p.trust.distrusts(m.Prov.Node)}, nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgPage reads a page's state and its encoded record (nil for a
// tombstone); pgx.ErrNoRows if there is none.
func pgPage(ctx context.Context, q querier, id int64) (docMeta, []byte, error) {
	var m docMeta
	var rec []byte
	var tns, rns, hash, seq int64
	err := q.QueryRow(ctx, `SELECT url, gone, time_ns, hash, node, seq, received_ns, record FROM micra.pages WHERE id = $1`, id).
		Scan(&m.URL, &m.Gone, &tns, &hash, &m.Prov.Node, &seq, &rns, &rec)
	if err != nil {
		return m, nil, err
	}
	m.Time, m.Hash, m.Prov.Seq, m.Prov.Received = timeNS(tns), uint64(hash), uint64(seq), timeNS(rns)
	if !m.Gone && rec == nil {
		return m, nil, fmt.Errorf("%w: live page %s without a record", ErrCorruptValue, m.URL)
	}
	return m, rec, nil
}

// HostsOf: see Index.HostsOf. It reads the node's live pages through an
// index on the node.
func (p *Postgres) HostsOf(ctx context.Context, node string, max int) ([]string, error) {
	if err := p.check(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := p.readCtx(ctx)
	defer cancel()
	rows, err := p.pool.Query(ctx, `SELECT url FROM micra.pages WHERE node = $1 AND NOT gone LIMIT $2`, node, maxHostsScan)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	var out []string
	for rows.Next() && len(out) < max {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" && !seen[u.Hostname()] {
			seen[u.Hostname()] = true
			out = append(out, u.Hostname())
		}
	}
	return out, rows.Err()
}

// eachRecord: see Store. One repeatable-read transaction is the snapshot;
// rows stream in id order.
func (p *Postgres) eachRecord(ctx context.Context, f func(docID, *Doc) error) error {
	tx, err := p.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT node, seq, received_ns, record FROM micra.pages WHERE NOT gone ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var d Doc
		var seq, rns int64
		var rec []byte
		if err := rows.Scan(&d.Provenance.Node, &seq, &rns, &rec); err != nil {
			return err
		}
		if d.Record, err = crawl.DecodeRecord(rec); err != nil {
			return fmt.Errorf("%w: record: %v", ErrCorruptValue, err)
		}
		d.Provenance.Seq, d.Provenance.Received = uint64(seq), timeNS(rns)
		d.Distrusted = p.trust.distrusts(d.Provenance.Node)
		if err := f(idOf(d.URL), &d); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Export: see Index.Export.
func (p *Postgres) Export(ctx context.Context, w io.Writer) (int, error) {
	return exportJSONL(ctx, p, w)
}

// ExportNTriples: see Index.ExportNTriples.
func (p *Postgres) ExportNTriples(ctx context.Context, w io.Writer) (NTriplesStats, error) {
	return exportNTriples(ctx, p, w)
}

// pgID is the key of a page in the tables: the first 64 bits of its id
// with the sign bit flipped, so that bigint order is id order.
func pgID(id docID) int64 {
	return int64(binary.BigEndian.Uint64(id[:8]) ^ 1<<63)
}
