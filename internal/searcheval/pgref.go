package searcheval

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/micra-net/micra/internal/pgserver"
)

// The full-text reference: PostgreSQL's full-text search over the pages'
// full text, as an operator would set it up: the english configuration,
// the title weighted above the body (setweight A and D), a GIN index, all
// of the query's words required (plainto_tsquery) and ts_rank_cd to rank.

const pgSchema = `
CREATE TABLE pages (
	url   text PRIMARY KEY,
	title text NOT NULL,
	body  text NOT NULL,
	tsv   tsvector GENERATED ALWAYS AS (
		setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'D')) STORED
);
CREATE INDEX pages_tsv ON pages USING gin (tsv);
`

const pgQuery = `
SELECT url FROM pages, plainto_tsquery('english', $1) q
WHERE tsv @@ q ORDER BY ts_rank_cd(tsv, q) DESC, url LIMIT 10`

// maxFullText bounds the text of one page given to to_tsvector, whose
// result may not exceed 1 MiB.
const maxFullText = 1 << 20

type pgEngine struct {
	pool *pgxpool.Pool
}

func (e pgEngine) search(ctx context.Context, q string) ([]string, error) {
	rows, err := e.pool.Query(ctx, pgQuery, q)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// startReference loads the pages' full text, fetched from the site as the
// crawler fetched it, into a new database on srv. The returned stop
// function closes its connections.
func startReference(ctx context.Context, srv *pgserver.Server, pages []string) (pgEngine, func(), int64, error) {
	stop := func() {}
	fail := func(err error) (pgEngine, func(), int64, error) {
		stop()
		return pgEngine{}, nil, 0, err
	}
	if err := srv.CreateDB(ctx, "searcheval"); err != nil {
		return fail(err)
	}
	pool, err := pgxpool.New(ctx, srv.DSN("searcheval"))
	if err != nil {
		return fail(err)
	}
	stop = pool.Close
	if _, err := pool.Exec(ctx, pgSchema); err != nil {
		return fail(fmt.Errorf("reference schema: %w", err))
	}
	client := &http.Client{Timeout: 30 * time.Second}
	batch := &pgx.Batch{}
	for _, u := range pages {
		title, body, err := fullText(ctx, client, u)
		if err != nil {
			return fail(err)
		}
		batch.Queue(`INSERT INTO pages (url, title, body) VALUES ($1, $2, $3) ON CONFLICT (url) DO NOTHING`, u, title, body)
		if batch.Len() == 200 {
			if err := pool.SendBatch(ctx, batch).Close(); err != nil {
				return fail(fmt.Errorf("loading the reference: %w", err))
			}
			batch = &pgx.Batch{}
		}
	}
	if err := pool.SendBatch(ctx, batch).Close(); err != nil {
		return fail(fmt.Errorf("loading the reference: %w", err))
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE pages`); err != nil {
		return fail(err)
	}
	var size int64
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('pages')`).Scan(&size); err != nil {
		return fail(err)
	}
	return pgEngine{pool: pool}, stop, size, nil
}

// fullText fetches a page and returns its title and visible text.
func fullText(ctx context.Context, client *http.Client, u string) (title, body string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("%s: %s", u, resp.Status)
	}
	doc, err := goquery.NewDocumentFromReader(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", u, err)
	}
	title = strings.TrimSpace(doc.Find("title").First().Text())
	doc.Find("head, script, style, noscript, template").Remove()
	body = strings.Join(strings.Fields(doc.Text()), " ")
	if len(body) > maxFullText {
		body = strings.ToValidUTF8(body[:maxFullText], "")
	}
	return title, body, nil
}
