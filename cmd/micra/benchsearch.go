package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/micra-net/micra/internal/searcheval"
)

// benchSearch measures search quality on real sites with human-made
// judgments, micra beside PostgreSQL's full-text search
// (internal/searcheval; docs/search-quality.md).
func benchSearch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench search", "[flags]", stderr)
	var names []string
	for _, c := range searcheval.Corpora {
		names = append(names, c.Name)
	}
	corpora := fs.String("corpus", "django,octave", "sites to evaluate: names of known corpora ("+strings.Join(names, ", ")+") or directories of HTML, comma-separated")
	queries := fs.String("queries", "", "judgments as JSON Lines `FILE` ({\"query\": …, \"relevant\": [paths]}); default: read from each site's own index pages, which are then kept out of the crawl")
	writeQueries := fs.String("write-queries", "", "write the judgments used to `FILE` as JSON Lines (one corpus only)")
	maxQueries := fs.Int("max-queries", 0, "evaluate an evenly spaced sample of this many judgments (0: all)")
	keywords := fs.Int("keywords", 0, "the crawler's keyword cap per record (0: its default)")
	reference := fs.Bool("reference", true, "run PostgreSQL's full-text search over the full pages beside micra (needs postgresql-15)")
	addr := fs.String("addr", "127.0.0.1:0", "loopback `ADDRESS` to serve each site on")
	asJSON := fs.Bool("json", false, "print the reports as one JSON object")
	writeMisses := fs.String("write-misses", "", "write each query an engine ranked no relevant page of in its first 10 to `FILE` as JSON Lines, with the engine and the first three hits")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *maxQueries < 0 || *keywords < 0 || *keywords > 4096 {
		return fmt.Errorf("%w: --max-queries must be at least 0 and --keywords in 0..4096", errUsage)
	}
	var dirs []string
	for _, name := range strings.Split(*corpora, ",") {
		name = strings.TrimSpace(name)
		if c, ok := searcheval.FindCorpus(name); ok {
			if !c.Installed() {
				return fmt.Errorf("corpus %s: %s is missing: apt-get install %s", name, c.Dir, c.Package)
			}
			dirs = append(dirs, c.Dir)
			continue
		}
		if st, err := os.Stat(name); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: --corpus %q is neither a known corpus (%s) nor a directory", errUsage, name, strings.Join(names, ", "))
		}
		dirs = append(dirs, name)
	}
	if (*queries != "" || *writeQueries != "") && len(dirs) != 1 {
		return fmt.Errorf("%w: --queries and --write-queries take one corpus", errUsage)
	}
	var js []searcheval.Judgment
	if *queries != "" {
		f, err := os.Open(*queries)
		if err != nil {
			return err
		}
		js, err = searcheval.ReadJudgments(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *queries, err)
		}
	}
	if *writeQueries != "" {
		if js == nil {
			var err error
			if js, _, err = searcheval.Judgments(dirs[0]); err != nil {
				return err
			}
		}
		if err := writeFile(*writeQueries, func(w io.Writer) error { return searcheval.WriteJudgments(w, js) }); err != nil {
			return err
		}
	}
	var misses io.Writer
	if *writeMisses != "" {
		f, err := os.Create(*writeMisses)
		if err != nil {
			return err
		}
		defer f.Close()
		misses = f
	}
	var reports []*searcheval.Report
	for _, dir := range dirs {
		rep, err := searcheval.Run(ctx, searcheval.Config{Corpus: dir, Judgments: js, MaxQueries: *maxQueries,
			Keywords: *keywords, Reference: *reference, Addr: *addr, Log: stderr, Misses: misses})
		if errors.Is(err, searcheval.ErrNoReference) {
			return fmt.Errorf("%w (or --reference=false for micra alone)", err)
		}
		if err != nil {
			return err
		}
		reports = append(reports, rep)
		if !*asJSON {
			rep.Print(stdout)
		}
	}
	if *asJSON {
		type row struct {
			*searcheval.Report
			ResultRatio float64 `json:"result_ratio"`
		}
		out := make([]row, len(reports))
		for i, r := range reports {
			out[i] = row{r, r.ResultRatio()}
		}
		return printJSON(stdout, map[string]any{"corpora": out})
	}
	return nil
}
