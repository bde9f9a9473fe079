package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/indexer"
	"github.com/micra-net/micra/node"
)

// indexerCommands are the client forms of micra indexer; without one of
// them it runs an indexer.
var indexerCommands = []subcommand{
	{"profiles", indexerProfiles},
	{"export", indexerExport},
	{"crawl", indexerCrawl},
}

const indexerSynopsis = `[flags]
       micra indexer profiles [--api URL] list | show NAME | add [--threshold T] NAME WORD[:WEIGHT]... | delete NAME
       micra indexer export [--api URL] [--format jsonl|ntriples] [--out FILE]
       micra indexer crawl [--api URL] [--depth N] [--owner NAME] URL...

Runs an indexer: it joins the overlay, announces itself as a designated
indexer, verifies, stores and acknowledges the result batches of the shards
it takes, and serves search, profiles, export and crawl requests over HTTP.
The other forms talk to a running indexer's HTTP API.

Flags of the indexer:`

// indexerServe runs an indexer: micra indexer without a client form.
func indexerServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "help" {
		args = []string{"-h"}
	}
	cfg, err := indexerConfig(args, stderr)
	if err != nil {
		return err
	}
	x, err := node.StartIndexer(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "indexer %s\n", x.ID())
	for _, a := range x.Addrs() {
		fmt.Fprintf(stdout, "listening on %s\n", a)
	}
	fmt.Fprintf(stdout, "search on http://%s/\n", x.HTTPAddr())
	<-ctx.Done()
	cfg.Logger.Info("indexer shutting down")
	return x.Close()
}

// indexerConfig builds an indexer's configuration from its flags and the
// environment; every value is checked.
func indexerConfig(args []string, stderr io.Writer) (node.IndexerConfig, error) {
	var none node.IndexerConfig
	fs := newFlagSet("indexer", indexerSynopsis, stderr)
	data := fs.String("data-dir", defaultIndexerDir(), "data `DIR`: the database and the identity key (as micra node's)")
	listen := fs.String("listen", "/ip4/0.0.0.0/tcp/7467,/ip4/0.0.0.0/udp/7467/quic-v1", "libp2p listen `MULTIADDRS`, comma-separated")
	boot := fs.String("bootstrap", "", "bootstrap peers: `MULTIADDRS` ending in /p2p/<id>, comma-separated (also $MICRA_BOOTSTRAP)")
	httpAddr := fs.String("http", defaultIndexerAPI, "`ADDR` of the HTTP search page and API (keep it on loopback unless behind a proxy)")
	shards := fs.Int("shards", 1, "number of result shards in the network (all nodes and indexers must agree)")
	take := fs.String("take", "", "`SHARDS` to take, comma-separated (default: all)")
	readOnly := fs.Bool("read-only", false, "serve search and export only: no profile changes, no crawl requests; with --store also no result batches (search over a database other indexers fill)")
	store := fs.String("store", os.Getenv("MICRA_STORE"), "PostgreSQL `DSN` (postgres://user@host/db) to keep the index in, shared with other indexers; default: the indexer's own database in --data-dir (also $MICRA_STORE)")
	snap := fs.String("snapshot", "", "subnet snapshot `FILE` (default: the one built into micra)")
	keys := fs.String("snapshot-keys", "", "release `KEYS` (ed25519:BASE64, comma-separated) whose snapshot releases the indexer switches to, as the nodes' snapshot_keys")
	announce := fs.Duration("announce", time.Minute, "how often to announce this indexer")
	dns := fs.String("dns", "", "`ADDR:PORT` of the DNS server for crawl requests and audits (default: the system's resolver)")
	auditShare := fs.Float64("audit-share", 0.02, "share of stored records to have audited by other nodes (0: none)")
	patience := fs.Duration("crawl-patience", 30*time.Minute, "submit a crawl request again when no record of its page came within this (doubling, six times in all)")
	liveness := fs.Duration("liveness", 5*time.Minute, "silence after which the shards this indexer coordinates orphan a crawler's subnets (use the nodes' --liveness)")
	grace := fs.Duration("withhold-grace", 10*time.Minute, "after a first notice that a node left a crawl request unanswered, wait this long before the shards this indexer coordinates may take its subnet back (use the nodes' --withhold-grace; under --crawl-patience)")
	private := fs.Bool("allow-private-networks", false, "take seeds on, and coordinate delegations of, private, loopback and other special-purpose addresses (for an emulated Internet only)")
	verbose := fs.Bool("v", false, "log at debug level (the same as --log-level debug)")
	logLevel := fs.String("log-level", "info", "`LEVEL`: debug, info, warn or error")
	configFile := fs.String("config", "", "TOML configuration `FILE`, keys as these flags with _ for - (also $MICRA_INDEXER_CONFIG); MICRA_INDEXER_<KEY> variables override it, flags override both")
	if err := parseFlags(fs, args); err != nil {
		return none, err
	}
	file := *configFile
	if file == "" {
		file = os.Getenv("MICRA_INDEXER_CONFIG")
	}
	if err := applySettings(fs, file, os.Environ(), "MICRA_INDEXER_", "config"); err != nil {
		return none, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return none, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	peers, err := bootstrap.ParseList("--bootstrap", *boot)
	if err != nil {
		return none, fmt.Errorf("%w: %v", errUsage, err)
	}
	envPeers, err := bootstrap.FromEnv()
	if err != nil {
		return none, err
	}
	peers = bootstrap.Merge(peers, envPeers, bootstrap.Defaults())
	opts := []indexer.Option{indexer.Shards(*shards), indexer.AnnounceEvery(*announce), indexer.Audits(*auditShare, 120),
		indexer.CrawlPatience(*patience, 6)}
	if *dns != "" {
		server, err := netip.ParseAddrPort(*dns)
		if err != nil {
			return none, fmt.Errorf("%w: --dns %q: %v", errUsage, *dns, err)
		}
		opts = append(opts, indexer.DNSServer(server))
	}
	if *take != "" {
		var ss []int
		for _, s := range splitList(*take) {
			n, err := strconv.Atoi(s)
			if err != nil {
				return none, fmt.Errorf("%w: --take %q: shards are 0 to %d", errUsage, s, *shards-1)
			}
			ss = append(ss, n)
		}
		opts = append(opts, indexer.Take(ss...))
	}
	level, err := node.ParseLogLevel(*logLevel)
	if err != nil {
		return none, fmt.Errorf("%w: --log-level %v", errUsage, err)
	}
	if *verbose {
		level = slog.LevelDebug
	}
	cfg := node.IndexerConfig{
		DataDir: *data, Listen: splitList(*listen), Bootstrap: peers, HTTP: *httpAddr, ReadOnly: *readOnly, Store: *store,
		Snapshot: *snap, SnapshotKeys: splitList(*keys), Indexer: opts, AllowPrivateNetworks: *private,
		// Indexers coordinate shards like nodes: the nodes' liveness
		// clock and withholding grace, in the same bounds.
		Liveness: *liveness, WithholdGrace: *grace,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if err := cfg.Validate(); err != nil {
		return none, fmt.Errorf("%w: %v", errUsage, asFlags(err))
	}
	return cfg, nil
}

// asFlags names each setting err names (node.SettingError) by its flag,
// as the indexer's settings are given: --withhold-grace for
// withhold_grace.
func asFlags(err error) error {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = slices.Clone(j.Unwrap())
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		if se, ok := e.(*node.SettingError); ok {
			errs[i] = fmt.Errorf("--%s %v", strings.ReplaceAll(se.Key, "_", "-"), se.Err)
		}
	}
	return errors.Join(errs...)
}

func defaultIndexerDir() string { return node.DefaultDataDir("indexer") }

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// apiProfile is a profile as the API returns it.
type apiProfile struct {
	Name     string `json:"name"`
	Keywords []struct {
		Word   string  `json:"word"`
		Weight float64 `json:"weight"`
	} `json:"keywords"`
	Threshold float64 `json:"threshold"`
	Matches   int64   `json:"matches"`
	Pending   bool    `json:"pending"`
}

func (p apiProfile) keywords() string {
	var b strings.Builder
	for i, k := range p.Keywords {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%g", k.Word, k.Weight)
	}
	return b.String()
}

func indexerProfiles(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("indexer profiles", "[--api URL] list | show NAME | add [--threshold T] NAME WORD[:WEIGHT]... | delete NAME", stderr)
	api := apiFlag(fs)
	if err := parseArgs(fs, args, atLeast(1), "missing subcommand"); err != nil {
		return err
	}
	c, err := newAPIClient(*api)
	if err != nil {
		return err
	}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	switch sub {
	case "list":
		var out struct {
			Profiles []apiProfile `json:"profiles"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/profiles", nil, nil, &out); err != nil {
			return err
		}
		if len(out.Profiles) == 0 {
			fmt.Fprintln(stdout, "no profiles")
		}
		for _, p := range out.Profiles {
			fmt.Fprintf(stdout, "%s\tthreshold %g\t%d matches\t%s\n", p.Name, p.Threshold, p.Matches, p.keywords())
		}
		return nil
	case "show":
		if len(rest) != 1 {
			return fmt.Errorf("%w: profiles show needs one NAME", errUsage)
		}
		var p apiProfile
		if err := c.do(ctx, http.MethodGet, "/api/profiles/"+url.PathEscape(rest[0]), nil, nil, &p); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\tthreshold %g\t%d matches\t%s\n", p.Name, p.Threshold, p.Matches, p.keywords())
		var m struct {
			Matches []struct {
				URL       string  `json:"url"`
				Title     string  `json:"title"`
				Relevance float64 `json:"relevance"`
			} `json:"matches"`
		}
		if err := c.do(ctx, http.MethodGet, "/api/profiles/"+url.PathEscape(rest[0])+"/matches", url.Values{"limit": {"20"}}, nil, &m); err != nil {
			return err
		}
		for _, h := range m.Matches {
			fmt.Fprintf(stdout, "  %.3f  %s  %s\n", h.Relevance, h.URL, h.Title)
		}
		return nil
	case "add":
		afs := newFlagSet("indexer profiles add", "[--threshold T] NAME WORD[:WEIGHT]...", stderr)
		threshold := afs.Float64("threshold", 0, "least relevance in [0, 1] for a record to match")
		if err := parseArgs(afs, rest, atLeast(2), "profiles add needs NAME and at least one WORD"); err != nil {
			return err
		}
		body := map[string]any{"threshold": *threshold}
		var kws []map[string]any
		for _, w := range afs.Args()[1:] {
			word, weight := w, 1.0
			if i := strings.LastIndexByte(w, ':'); i > 0 {
				f, err := strconv.ParseFloat(w[i+1:], 64)
				if err != nil {
					return fmt.Errorf("%w: keyword %q: weight is not a number", errUsage, w)
				}
				word, weight = w[:i], f
			}
			kws = append(kws, map[string]any{"word": word, "weight": weight})
		}
		body["keywords"] = kws
		var p apiProfile
		if err := c.do(ctx, http.MethodPut, "/api/profiles/"+url.PathEscape(afs.Arg(0)), nil, body, &p); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "profile %s: threshold %g, %s\n", p.Name, p.Threshold, p.keywords())
		return nil
	case "delete":
		if len(rest) != 1 {
			return fmt.Errorf("%w: profiles delete needs one NAME", errUsage)
		}
		if err := c.do(ctx, http.MethodDelete, "/api/profiles/"+url.PathEscape(rest[0]), nil, nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "profile %s deleted\n", rest[0])
		return nil
	}
	fs.Usage()
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, sub)
}

func indexerExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("indexer export", "[--api URL] [--format jsonl|ntriples] [--out FILE]", stderr)
	api := apiFlag(fs)
	out := fs.String("out", "", "write to `FILE` instead of standard output")
	format := fs.String("format", "jsonl", "`FORMAT`: jsonl (every record, one JSON object a line) or ntriples (every page's structured data as one RDF graph in N-Triples)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *format != "jsonl" && *format != "ntriples" {
		return fmt.Errorf("%w: --format %q is neither jsonl nor ntriples", errUsage, *format)
	}
	c, err := newAPIClient(*api)
	if err != nil {
		return err
	}
	resp, err := c.send(ctx, http.MethodGet, "/api/export", url.Values{"format": {*format}}, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var n int64
	export := func(w io.Writer) error {
		if n, err = io.Copy(w, resp.Body); err != nil {
			return fmt.Errorf("export interrupted after %d bytes: %w", n, err)
		}
		return nil
	}
	if *out == "" {
		return export(stdout)
	}
	if err := writeFile(*out, export); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d bytes to %s\n", n, *out)
	return nil
}

func indexerCrawl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("indexer crawl", "[--api URL] [--depth N] [--owner NAME] URL...", stderr)
	api := apiFlag(fs)
	depth := fs.Int("depth", -1, "links to follow from each URL (-1: the crawlers' default)")
	owner := fs.String("owner", "", "on whose behalf (kept with the records)")
	if err := parseArgs(fs, args, atLeast(1), "indexer crawl needs at least one URL"); err != nil {
		return err
	}
	c, err := newAPIClient(*api)
	if err != nil {
		return err
	}
	body := map[string]any{"urls": fs.Args(), "depth": *depth}
	if *owner != "" {
		body["owners"] = []string{*owner}
	}
	type failure struct {
		URL   string `json:"url"`
		Error string `json:"error"`
	}
	var out struct {
		Sent   int       `json:"sent"`
		Later  []failure `json:"later"`
		Failed []failure `json:"failed"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/crawl", nil, body, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d URLs sent to the nodes owning their subnets\n", out.Sent)
	if len(out.Later) > 0 {
		fmt.Fprintf(stdout, "%d URLs kept by the indexer and sent again later (not taken now, or their node unreachable):\n", len(out.Later))
	}
	for _, f := range out.Later {
		fmt.Fprintf(stdout, "later: %s: %s\n", f.URL, f.Error)
	}
	for _, f := range out.Failed {
		fmt.Fprintf(stdout, "failed: %s: %s\n", f.URL, f.Error)
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("%d of %d URLs failed", len(out.Failed), fs.NArg())
	}
	return nil
}
