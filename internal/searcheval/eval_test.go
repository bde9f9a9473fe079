package searcheval

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// reference says whether the PostgreSQL reference runs: it does wherever
// PostgreSQL is installed, and must under CI=true.
func reference(t *testing.T, err error) bool {
	t.Helper()
	if errors.Is(err, ErrNoReference) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true needs PostgreSQL (apt-get install postgresql-15): %v", err)
		}
		t.Logf("without the reference: %v", err)
		return false
	}
	return true
}

// TestRunSite evaluates the small test site end to end: its index page is
// kept out of the crawl, every other page is crawled and indexed through
// batches, and every judgment is found by micra; the reference, where
// PostgreSQL is installed, gives its row too.
func TestRunSite(t *testing.T) {
	var log strings.Builder
	cfg := Config{Corpus: "testdata/site", Reference: true, Log: &log}
	rep, err := Run(t.Context(), cfg)
	if err != nil && reference(t, err) {
		t.Fatal(err)
	}
	if err != nil {
		cfg.Reference = false
		if rep, err = Run(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	rep.Print(&out)
	t.Log("\n" + out.String())
	if rep.Pages != 5 || rep.Judgments != 7 || rep.Unreachable != 0 {
		t.Errorf("pages %d (want 5: the index page is not crawled), judgments %d, unreachable %d", rep.Pages, rep.Judgments, rep.Unreachable)
	}
	m := rep.Row(EngineMicra)
	if m == nil || m.Success10 != 1 || m.NoResult != 0 || m.MRR10 < 0.8 || m.IndexBytes <= 0 {
		t.Errorf("micra: %+v", m)
	}
	if rep.BatchBytes <= 0 || rep.ResultRatio() >= 1 {
		t.Errorf("result ratio %v (%d of %d bytes)", rep.ResultRatio(), rep.BatchBytes, rep.Decoded)
	}
	if cfg.Reference {
		if p := rep.Row(EnginePostgres); p == nil || p.Success10 < 0.5 || p.IndexBytes <= 0 {
			t.Errorf("reference: %+v", p)
		}
		// micra's PostgreSQL store answers as its embedded one.
		pg := rep.Row(EngineMicraPG)
		if pg == nil || pg.MRR10 != m.MRR10 || pg.Success10 != m.Success10 || rep.Stores == nil || rep.Stores.Overlap10 != 1 ||
			rep.Stores.PostgresRecordsPerSec <= 0 || rep.Stores.EmbeddedRecordsPerSec <= 0 {
			t.Errorf("micra's PostgreSQL store: %+v, stores %+v", pg, rep.Stores)
		}
	}
}

// TestCorpora is the evaluation's short form on the real corpora (an
// evenly spaced sample of their judgments), with the full-text reference
// in the same run. It bounds what docs/search-quality.md reports: micra
// finds at least as much as PostgreSQL's full-text search over the full
// pages, ranks it at least as well, at most 1 % of queries find nothing,
// and its records stay small. The
// corpora are Debian packages that .ci/run installs; elsewhere the test
// skips without them.
func TestCorpora(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("crawls real manuals: -short and -race skip it (the plain run has it)")
	}
	for _, name := range []string{"django", "octave"} {
		t.Run(name, func(t *testing.T) {
			c, _ := FindCorpus(name)
			if !c.Installed() {
				if os.Getenv("CI") == "true" {
					t.Fatalf("CI=true needs %s (apt-get install %s)", c.Dir, c.Package)
				}
				t.Skipf("needs %s: apt-get install %s", c.Dir, c.Package)
			}
			rep, err := Run(t.Context(), Config{Corpus: c.Dir, MaxQueries: 600, Reference: true})
			if err != nil {
				if !reference(t, err) {
					t.Skip(err)
				}
				t.Fatal(err)
			}
			var out strings.Builder
			rep.Print(&out)
			t.Log("\n" + out.String())
			m, p := rep.Row(EngineMicra), rep.Row(EnginePostgres)
			if m.MRR10 < p.MRR10 || m.Success10 < p.Success10-0.01 || m.NoResult > p.NoResult+0.01 {
				t.Errorf("micra %+v\nbelow the reference %+v", m, p)
			}
			// The goal: at most 1 % of queries find nothing.
			if m.NoResult > 0.01 {
				t.Errorf("micra: %.1f %% of queries find nothing, over 1 %%", 100*m.NoResult)
			}
			if r := rep.ResultRatio(); r > 1.0/15 {
				t.Errorf("result ratio 1/%.1f, over 1/15", 1/r)
			}
			// The stores' overlap docs/postgres.md reports.
			if st := rep.Stores; st == nil || st.Overlap10 < 0.999 {
				t.Errorf("micra's stores: %+v, want the same top 10s", st)
			}
		})
	}
}
