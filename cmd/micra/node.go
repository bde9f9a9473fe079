package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/micra-net/micra/internal/suggest"
	"github.com/micra-net/micra/node"
)

func init() {
	commands["node"] = command{"run a volunteer node: join the overlay, probe, crawl, deliver results", runNode}
	commands["status"] = command{"print the status of the local node (its dashboard API)", runStatus}
}

const nodeSynopsis = `[flags]

Runs a volunteer node until interrupted (SIGINT or SIGTERM), then shuts it
down in order without losing state; run it again on the same data
directory and it resumes. Settings come from, in increasing precedence:
the defaults, a TOML file (--config or $MICRA_CONFIG; keys as the flags
with _ for -), MICRA_* environment variables (MICRA_CAPACITY=5000;
lists comma-separated, windows semicolon-separated) and these flags.

Resource limits (docs/volunteer.md): --bandwidth and --daily-transfer cap
downloads (at the daily cap crawling pauses until the next day);
--windows limits the hours; --disk-cap bounds the data directory and
--outbox-cap the results waiting for indexers (at either cap crawling
pauses; nothing is dropped); --workers bounds the pages fetched at once
and the CPUs parsing them; --memory-limit is the Go heap's soft limit (a
crawling node uses 130-170 MB in all: give a service's MemoryMax room).

Flags:`

// nodeFlags documents every configuration key as a flag, in the order of
// node.Config. A test checks that every key has one.
var nodeFlags = map[string]string{
	"data_dir":               "data `DIR`: the badger database and the identity key",
	"listen":                 "libp2p listen `MULTIADDRS`, comma-separated",
	"bootstrap":              "bootstrap peers: `MULTIADDRS` ending in /p2p/<peer id>, comma-separated (also $MICRA_BOOTSTRAP); none starts a new network",
	"bootstrap_file":         "`FILE` of more bootstrap peers, one multiaddr per line",
	"relays":                 "circuit relays to reserve slots on behind NAT: `MULTIADDRS` ending in /p2p/<peer id>, comma-separated (default: chosen among connected peers)",
	"source_addr":            "local `ADDR` that outgoing crawl and probe connections leave from (default: the system's choice)",
	"capacity":               "`PAGES` per day this node offers to crawl; coordinators balance delegations by it",
	"windows":                "`WINDOWS` when crawling and probing may happen, e.g. \"mon-fri 00:00-06:00;sat,sun 00:00-24:00\" (default: always)",
	"timezone":               "IANA time `ZONE` of the windows (default: the system's)",
	"bandwidth":              "download cap per second: a `SIZE` like 1MiB (0: none)",
	"daily_transfer":         "download cap per day: a `SIZE` like 10GB (0: none)",
	"allow_private_networks": "let the crawler reach private, loopback and other special-purpose addresses (for an emulated Internet only)",
	"allow_ports":            "`PORTS` allowed besides 80 and 443, comma-separated (with --allow-private-networks and none: every port)",
	"log_level":              "`LEVEL`: debug, info, warn or error",
	"dashboard":              "`ADDR` of the dashboard, its API and /metrics (empty: none)",
	"dashboard_token":        "`TOKEN` the dashboard requires (at least 16 characters; required off loopback)",
	"indexers":               "`N` designated indexers must acknowledge a result batch before it leaves the outbox",
	"outbox_cap":             "most results kept for indexers, a `SIZE`; at the cap crawling pauses",
	"disk_cap":               "most the data directory may take on disk, a `SIZE` (0: none); at the cap crawling pauses, nothing is dropped",
	"workers":                "`N` pages fetched at once; parsing runs on at most as many CPUs",
	"memory_limit":           "soft memory limit of the process, a `SIZE` (0: none)",
	"snapshot":               "subnet snapshot `FILE` (default: the one built into micra; every node of a network must use the same)",
	"snapshot_keys":          "release `KEYS` (ed25519:BASE64, comma-separated) whose signed snapshot releases this node fetches, keeps and serves",
	"dns":                    "`ADDR:PORT` of the DNS server for crawling and probing (default: the system's resolver)",
	"threshold":              "IPMicra's probing threshold, a `DURATION` like 50ms",
	"result_shards":          "`N` result topics network-wide (nodes and indexers must agree)",
	"liveness":               "silence, a `DURATION`, after which coordinators re-delegate a crawler's subnets; heartbeats every tenth of it (all nodes should agree)",
	"batch_wait":             "longest a batch of results stays open before it is sealed for indexers, a `DURATION`",
	"withhold_grace":         "how long, a `DURATION`, a coordinator waits after an indexer's first notice that a node left a crawl request unanswered before it may take the subnet back",
}

// nodeConfig builds a node's configuration from the defaults, the TOML
// file, the environment and args, in that order.
func nodeConfig(args []string, environ []string, stderr io.Writer) (node.Config, error) {
	fs := newFlagSet("node", nodeSynopsis, stderr)
	def := node.DefaultConfig()
	configFile := fs.String("config", "", "TOML configuration `FILE` (also $MICRA_CONFIG)")
	type setting struct{ key, value string }
	var set []setting
	for _, key := range node.Keys() {
		name := strings.ReplaceAll(key, "_", "-")
		help := nodeFlags[key] + defaultNote(def, key)
		if key == "allow_private_networks" {
			fs.BoolFunc(name, help, func(v string) error { set = append(set, setting{key, v}); return nil })
			continue
		}
		fs.Func(name, help, func(v string) error { set = append(set, setting{key, v}); return nil })
	}
	if err := parseFlags(fs, args); err != nil {
		return node.Config{}, err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return node.Config{}, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	// Every problem of the file, the environment, the flags and the
	// resulting values is named at once, not only the first.
	cfg := def
	var errs []error
	file := *configFile
	if file == "" {
		file = lookupEnv(environ, "MICRA_CONFIG")
	}
	if file != "" {
		if err := cfg.LoadFile(file); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cfg.LoadEnv(environ); err != nil {
		errs = append(errs, err)
	}
	warnUnknownEnv(stderr, environ)
	for _, s := range set {
		if err := cfg.Set(s.key, s.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %v", strings.ReplaceAll(s.key, "_", "-"), err))
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("%w: %v", errUsage, errors.Join(errs...))
	}
	return cfg, nil
}

// otherVariables are the MICRA_* variables micra's commands read besides
// the node's keys and the indexer's MICRA_INDEXER_<KEY>.
var otherVariables = []string{"MICRA_CONFIG", "MICRA_DATA", "MICRA_STORE", "MICRA_INDEXER", "MICRA_DASHBOARD", "MICRA_INDEXER_CONFIG"}

// warnUnknownEnv warns, on w, of each MICRA_* variable of environ that
// micra does not read (a misspelled setting would otherwise be ignored
// without a word), naming the one it was probably meant to be.
func warnUnknownEnv(w io.Writer, environ []string) {
	known := slices.Clone(otherVariables)
	for _, k := range node.Keys() {
		known = append(known, node.EnvPrefix+strings.ToUpper(k))
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, node.EnvPrefix) || strings.HasPrefix(name, "MICRA_INDEXER_") || slices.Contains(known, name) {
			continue
		}
		hint := ""
		if s, ok := suggest.Closest(name, known); ok {
			hint = fmt.Sprintf(" (did you mean %s?)", s)
		}
		fmt.Fprintf(w, "micra node: warning: %s is not a variable micra reads; ignored%s\n", name, hint)
	}
}

// defaultNote renders key's default for the flag's help, "" when empty.
func defaultNote(def node.Config, key string) string {
	switch v := tomlView(def)[key].(type) {
	case string:
		if v != "" {
			return fmt.Sprintf(" (default %q)", v)
		}
	case []string:
		if len(v) > 0 {
			return fmt.Sprintf(" (default %q)", strings.Join(v, ","))
		}
	case int:
		return fmt.Sprintf(" (default %d)", v)
	}
	return ""
}

// tomlView maps a Config's TOML keys to its values.
func tomlView(c node.Config) map[string]any {
	out := map[string]any{
		"data_dir": c.DataDir, "listen": c.Listen, "bootstrap": c.Bootstrap, "bootstrap_file": c.BootstrapFile, "relays": c.Relays, "source_addr": c.SourceAddr,
		"capacity": c.Capacity, "windows": c.Windows, "timezone": c.Timezone, "bandwidth": c.Bandwidth,
		"daily_transfer": c.DailyTransfer, "allow_private_networks": c.AllowPrivateNetworks, "allow_ports": c.AllowPorts,
		"log_level": c.LogLevel, "dashboard": c.Dashboard, "dashboard_token": c.DashboardToken, "indexers": c.Indexers,
		"outbox_cap": c.OutboxCap, "disk_cap": c.DiskCap, "workers": c.Workers, "memory_limit": c.MemoryLimit, "snapshot": c.Snapshot, "snapshot_keys": c.SnapshotKeys, "dns": c.DNS,
		"threshold": c.Threshold, "result_shards": c.ResultShards, "liveness": c.Liveness, "batch_wait": c.BatchWait,
		"withhold_grace": c.WithholdGrace,
	}
	return out
}

func lookupEnv(environ []string, name string) string {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := nodeConfig(args, os.Environ(), stderr)
	if err != nil {
		return err
	}
	n, err := node.New(cfg, node.LogOutput(stderr))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s\n", n.ID())
	for _, a := range n.Addrs() {
		fmt.Fprintf(stdout, "listening on %s\n", a)
	}
	if a := n.DashboardAddr(); a != "" {
		fmt.Fprintf(stdout, "dashboard on http://%s/\n", a)
	}
	return n.Run(ctx)
}

const statusSynopsis = `[flags]

Prints what the local node's dashboard shows, from its API.

Flags:`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusSynopsis, stderr)
	addr := fs.String("dashboard", node.DefaultConfig().Dashboard, "`ADDR` of the node's dashboard (also $MICRA_DASHBOARD)")
	token := fs.String("token", "", "the dashboard's `TOKEN`, if it has one (also $MICRA_DASHBOARD_TOKEN)")
	asJSON := fs.Bool("json", false, "print the status as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	a, tok := dashboardTarget(fs, *addr, *token)
	st, err := fetchStatus(ctx, a, tok)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

// dashboardTarget returns the dashboard address and token a command talks
// to: the flags, with $MICRA_DASHBOARD for an address not given and
// $MICRA_DASHBOARD_TOKEN for an empty token.
func dashboardTarget(fs *flag.FlagSet, addr, token string) (string, string) {
	if v := os.Getenv("MICRA_DASHBOARD"); v != "" && !flagSet(fs, "dashboard") {
		addr = v
	}
	if v := os.Getenv("MICRA_DASHBOARD_TOKEN"); v != "" && token == "" {
		token = v
	}
	return addr, token
}

func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// fetchStatus reads a node's /api/status (node.FetchStatus); a bad
// address is a usage error.
func fetchStatus(ctx context.Context, addr, token string) (node.Status, error) {
	st, err := node.FetchStatus(ctx, addr, token)
	if errors.Is(err, node.ErrDashboardAddr) {
		return st, fmt.Errorf("%w: --dashboard: %v", errUsage, err)
	}
	return st, err
}

// printStatus prints the facts of the dashboard as text.
func printStatus(w io.Writer, st node.Status) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	row("node", "%s", st.Peer)
	for _, a := range st.Addrs {
		row("address", "%s", a)
	}
	row("up", "%v (snapshot %s)", st.Now.Sub(st.Started).Round(time.Second), st.Snapshot)
	if r := st.Release; r != nil {
		file := "file ready"
		if !r.Ready {
			file = fmt.Sprintf("fetching its file (%d peers hold it)", r.Holders)
		}
		row("next snapshot", "%s from %s, %s", r.Snapshot, r.Activation.Format(time.RFC3339), file)
	}
	if st.ReleasesRefused > 0 || st.ReleaseBadPeers > 0 {
		row("releases", "%d refused, %d peers served wrong snapshot files", st.ReleasesRefused, st.ReleaseBadPeers)
	}
	row("peers", "%d", st.Peers)
	relayed := 0
	for _, c := range st.Conns {
		if c.Relayed {
			relayed++
		}
	}
	row("reachability", "%s; %d connections, %d through relays", st.Reachability, len(st.Conns), relayed)
	row("shards coordinated", "%d", st.Shards)
	row("capacity", "%s pages a day offered, %s delegated (%.1f %%)", humanize.Comma(int64(st.Capacity)), humanize.Comma(int64(st.Load)),
		100*float64(st.Load)/float64(max(st.Capacity, 1)))
	win := "open"
	if !st.Window.Open {
		win = "closed"
	}
	if !st.Window.Next.IsZero() {
		win += " until " + st.Window.Next.Format(time.RFC3339)
	}
	row("crawl window", "%s", win)
	row("crawl", "%d pages fetched, %d records, %d queued on %d hosts, %d in flight, %d errors, %d refused by robots.txt, %d bytes",
		st.Crawl.Fetched, st.Crawl.Records, st.Crawl.Queued, st.Crawl.Hosts, st.Crawl.InFlight, st.Crawl.Errors, st.Crawl.RobotsDenied, st.Crawl.Bytes)
	today := humanize.IBytes(uint64(max(st.Crawl.TodayBytes, 0))) + " (no daily cap)"
	if st.Crawl.DailyCap > 0 {
		today = fmt.Sprintf("%s of %s", humanize.IBytes(uint64(max(st.Crawl.TodayBytes, 0))), humanize.IBytes(uint64(st.Crawl.DailyCap)))
	}
	row("downloaded today", "%s", today)
	if len(st.Crawl.Crawling) > 0 {
		row("crawling now", "%s", strings.Join(st.Crawl.Crawling, ", "))
	}
	row("outbox", "%d batches, %d of %d bytes; %d acknowledged; %d indexers known", st.Outbox.Batches, st.Outbox.Bytes, st.Outbox.Cap, st.Outbox.Acked, st.Indexers)
	row("probes", "%d run for coordinators, %d issued as coordinator", st.Probes.Run, st.Probes.Issued)
	row("subnets", "%d delegated", len(st.Subnets))
	tw.Flush()
	for _, s := range st.Subnets {
		rtt := "no probe"
		if s.RTTms >= 0 {
			rtt = fmt.Sprintf("%.1f ms", s.RTTms)
		}
		org := s.Org
		if s.OrgName != "" {
			org = s.OrgName + " (" + s.Org + ")"
		}
		fmt.Fprintf(w, "  %-20s %-10s %s\n", s.Range, rtt, org)
	}
	for _, m := range st.Warnings {
		fmt.Fprintf(w, "warning: %s\n", m)
	}
}
