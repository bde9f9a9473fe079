package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/micra-net/micra/indexer/index"
)

func runSearch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("search", `[--api URL] [--limit N] [--offset N] [--any] [--json] QUERY...

Searches a running indexer. A query holds words ("-word" excludes) and
conditions on the pages' structured data: type:TYPE (type:Recipe,
type:schema:Event, type:<IRI>) and PROP=VALUE (author=alice,
schema:price=10, 'author="alice smith"'); "-type:Event" excludes.
Bare names are schema.org's.

Flags:`, stderr)
	api := apiFlag(fs)
	limit := fs.Int("limit", 10, "results per page")
	offset := fs.Int("offset", 0, "results to skip")
	anyWord := fs.Bool("any", false, "match any word instead of all")
	asJSON := fs.Bool("json", false, "print the API's JSON answer")
	if err := parseArgs(fs, args, atLeast(1), "search needs a QUERY"); err != nil {
		return err
	}
	c, err := newAPIClient(*api)
	if err != nil {
		return err
	}
	q := url.Values{"q": {strings.Join(fs.Args(), " ")}, "limit": {strconv.Itoa(*limit)}, "offset": {strconv.Itoa(*offset)}}
	if *anyWord {
		q.Set("mode", "any")
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/api/search", q, nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		_, err := fmt.Fprintf(stdout, "%s\n", raw)
		return err
	}
	var res struct {
		Query     string `json:"query"`
		Total     int    `json:"total"`
		Estimated bool   `json:"estimated"`
		Partial   bool   `json:"partial"`
		Split     []struct {
			Word string   `json:"word"`
			As   []string `json:"as"`
		} `json:"split"`
		Offset int     `json:"offset"`
		TookMS float64 `json:"took_ms"`
		Hits   []struct {
			URL     string   `json:"url"`
			Title   string   `json:"title"`
			Type    string   `json:"type"`
			Score   float64  `json:"score"`
			Types   []string `json:"types"`
			Matched []string `json:"matched"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	about := ""
	if res.Estimated {
		about = "about "
	}
	fmt.Fprintf(stdout, "%s%d results for %q (%.1f ms)\n", about, res.Total, res.Query, res.TookMS)
	for _, s := range res.Split {
		fmt.Fprintf(stdout, "no page has %q: searched as %q\n", s.Word, strings.Join(s.As, " "))
	}
	if res.Partial {
		fmt.Fprintln(stdout, "no page has all of these words: these have some of them, those with the most first")
	}
	for i, h := range res.Hits {
		title := h.Title
		if title == "" {
			title = "(no title)"
		}
		has := ""
		if len(h.Matched) > 0 {
			has = ", has " + strings.Join(h.Matched, " ")
		}
		fmt.Fprintf(stdout, "%3d. %s\n     %s  [%s, score %.3f%s]\n", res.Offset+i+1, title, h.URL, h.Type, h.Score, has)
		if len(h.Types) > 0 {
			short := make([]string, len(h.Types))
			for i, t := range h.Types {
				short[i] = index.ShortName(t)
			}
			fmt.Fprintf(stdout, "     types: %s\n", strings.Join(short, ", "))
		}
	}
	return nil
}
