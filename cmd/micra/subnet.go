package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/micra-net/micra/subnet"
	"github.com/micra-net/micra/subnet/embedded"
)

// subnetUsage is the usage of micra subnet.
const subnetUsage = `Usage: micra subnet <command> [arguments]

Commands:
  import [--out FILE] [--strict] [--format F] [--progress WHEN] INPUT...
         build a snapshot from registry files (delegated, RPSL, ip2asn CSV; gzip read directly)
  lookup [--snapshot FILE] [--json] ADDR...
         print the chain of ranges from the root to each address
  stats  [--snapshot FILE] [--json]
         print the shape and size of a snapshot
  diff   [--json] [--examples N] OLD NEW
         count the ranges unchanged, split, merged, removed and added between two snapshots
  keygen --out FILE
         make a release key for a network's snapshots
  publish --key FILE --parent OLD [--activate WHEN] [--out FILE] SNAPSHOT
         sign a release: SNAPSHOT replaces OLD on every node at WHEN
  verify --keys KEY[,KEY] RELEASE [SNAPSHOT]
         check a release's signature and times, and that SNAPSHOT is the file it names
  offer  [--dashboard ADDR] [--token T] RELEASE SNAPSHOT
         hand a release to a running node, which checks it and spreads it over the network

Without --snapshot, lookup and stats use the snapshot built into micra; "builtin"
names it where a command takes snapshot files.`

// subnetCommands are the subcommands of micra subnet.
var subnetCommands = []subcommand{
	{"import", subnetImport},
	{"lookup", subnetLookup},
	{"stats", subnetStats},
	{"diff", subnetDiff},
	{"keygen", subnetKeygen},
	{"publish", subnetPublish},
	{"verify", subnetVerify},
	{"offer", subnetOffer},
}

func subnetImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet import", "[flags] INPUT...", stderr)
	out := fs.String("out", "", "write the snapshot to `FILE` (without it, only check the inputs and print the summary)")
	strict := fs.Bool("strict", false, "stop at the first malformed line, naming file and line (default: skip and count)")
	format := fs.String("format", "auto", "input `format` for all inputs: auto, delegated, rpsl, ip2asn")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
	if err := parseArgs(fs, args, atLeast(1), "no inputs"); err != nil {
		return err
	}
	f, err := subnet.ParseFormat(*format)
	if err != nil {
		return fmt.Errorf("%w: --format: %v", errUsage, err)
	}
	var total int64
	for _, in := range fs.Args() {
		st, err := os.Stat(in)
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("%s is a directory; name the files", in)
		}
		total += st.Size()
	}
	show := false
	switch *progress {
	case "always":
		show = true
	case "never":
	case "auto":
		fd, ok := stderr.(*os.File)
		show = ok && term.IsTerminal(int(fd.Fd())) && total >= 1<<20
	default:
		return fmt.Errorf("%w: --progress must be auto, always or never", errUsage)
	}
	opts := []subnet.Option{}
	if *strict {
		opts = append(opts, subnet.Strict())
	}
	var bar *progressbar.ProgressBar
	if show {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription("importing"),
			progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		opts = append(opts, subnet.Progress(func(n int64) { _ = bar.Add64(n) }))
	}
	b, err := subnet.NewBuilder(opts...)
	if err != nil {
		return err
	}
	for _, in := range fs.Args() {
		if bar != nil {
			bar.Describe(filepath.Base(in))
		}
		if _, err := b.AddFile(ctx, in, f); err != nil {
			return err
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	t, rep, err := b.Build()
	if err != nil {
		return err
	}
	printImportReport(stdout, rep)
	fmt.Fprintf(stdout, "snapshot id %s\n", t.ID())
	if *out == "" {
		return nil
	}
	tmp := *out + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := t.WriteSnapshot(fh); err != nil {
		return errors.Join(err, fh.Close(), os.Remove(tmp))
	}
	if err := fh.Close(); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	if st, err := os.Stat(*out); err == nil {
		fmt.Fprintf(stdout, "wrote %s (%s)\n", *out, humanBytes(st.Size()))
	}
	return nil
}

func printImportReport(w io.Writer, rep *subnet.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "input\tformat\trecords\tranges\tskipped\theader says\t")
	for _, in := range rep.Inputs {
		header := "-"
		if in.HeaderRecords >= 0 {
			header = fmt.Sprint(in.HeaderRecords)
			if got := in.Records["asn"] + in.Records["ipv4"] + in.Records["ipv6"]; got != in.HeaderRecords {
				header += fmt.Sprintf(" (found %d)", got)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t\n", in.Name, in.Format, in.RecordTotal(), in.Ranges, in.Skipped, header)
	}
	tw.Flush()
	fmt.Fprintf(w, "built %d ranges of %d organisations in %v\n", rep.Ranges, rep.Orgs, rep.BuildTime.Round(time.Millisecond))
	fmt.Fprintf(w, "equal ranges merged: %d within a layer, %d across layers; ranges cut to fit: %d, into %d pieces\n",
		rep.Duplicates, rep.Combined, rep.Clipped, rep.Pieces)
	for _, in := range rep.Inputs {
		if in.Skipped == 0 {
			continue
		}
		fmt.Fprintf(w, "skipped in %s: %d lines\n", in.Name, in.Skipped)
		for _, e := range in.Issues {
			fmt.Fprintf(w, "  %s\n", e.Error())
		}
		if in.Skipped > len(in.Issues) {
			fmt.Fprintf(w, "  ... and %d more\n", in.Skipped-len(in.Issues))
		}
	}
}

// loadSnapshot reads the snapshot at path, or the built-in one when path is
// empty.
func loadSnapshot(path string) (*subnet.Tree, error) {
	if path == "" {
		return embedded.Tree()
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	t, err := subnet.ReadSnapshot(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// jsonRange is one range of a lookup chain as printed by --json.
type jsonRange struct {
	Start    string `json:"start"`
	End      string `json:"end"`
	Prefix   string `json:"prefix,omitempty"`
	Org      string `json:"org"`
	OrgName  string `json:"org_name,omitempty"`
	Country  string `json:"country"`
	Registry string `json:"registry"`
	Status   string `json:"status,omitempty"`
	ASN      uint32 `json:"asn,omitempty"`
	Source   string `json:"source"`
	Depth    int    `json:"depth"`
}

type jsonLookup struct {
	Address          string      `json:"address"`
	Snapshot         string      `json:"snapshot"`
	Chain            []jsonRange `json:"chain"`
	SmallestNonUnary jsonRange   `json:"smallest_non_unary"`
}

func toJSONRange(n subnet.Node) jsonRange {
	j := jsonRange{
		Start: n.Range.Start.String(), End: n.Range.End.String(),
		Org: n.Org, OrgName: n.OrgName, Country: n.Country, Registry: n.Registry,
		Status: n.Status, ASN: n.ASN, Source: n.Layer.String(), Depth: n.Depth,
	}
	if p, ok := n.Range.Prefix(); ok {
		j.Prefix = p.String()
	}
	return j
}

func subnetLookup(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet lookup", "[flags] ADDR...", stderr)
	snap := fs.String("snapshot", "", "read the hierarchy from `FILE` (default: the built-in snapshot)")
	asJSON := fs.Bool("json", false, "print one JSON object per address")
	if err := parseArgs(fs, args, atLeast(1), "no addresses"); err != nil {
		return err
	}
	addrs := make([]netip.Addr, 0, fs.NArg())
	for _, s := range fs.Args() {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("%w: %q is not an IP address", errUsage, s)
		}
		addrs = append(addrs, a.WithZone(""))
	}
	t, err := loadSnapshot(*snap)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	attribute := false
	for i, a := range addrs {
		chain := t.Chain(a)
		sn := t.SmallestNonUnary(a)
		if *asJSON {
			out := jsonLookup{Address: a.String(), Snapshot: t.ID().String(), SmallestNonUnary: toJSONRange(t.Node(sn))}
			for _, id := range chain {
				out.Chain = append(out.Chain, toJSONRange(t.Node(id)))
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s (snapshot %s)\n", a, t.ID().Short())
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "depth\trange\torganisation\tcountry\tregistry\tstatus\tsource\t")
		for _, id := range chain {
			n := t.Node(id)
			attribute = attribute || n.ASN != 0
			mark := ""
			if id == sn {
				mark = "  <- smallest non-unary"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Depth, n.Range, orgLabel(n), dash(n.Country), dash(n.Registry), dash(n.Status), n.Layer, mark)
		}
		tw.Flush()
	}
	if attribute {
		// The IP-to-ASN layer is CC BY 4.0 and asks for attribution.
		fmt.Fprintln(stdout, "\nAS data: Route Views (routeviews.org), DB-IP (db-ip.com), NRO (nro.net); CC BY 4.0")
	}
	return nil
}

// orgLabel shows an organisation by its name when the sources give one and
// by its key otherwise.
func orgLabel(n subnet.Node) string {
	s := n.Org
	if n.OrgName != "" {
		s = n.OrgName
	}
	if n.ASN != 0 {
		s += fmt.Sprintf(" AS%d", n.ASN)
	}
	return dash(s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type jsonStats struct {
	Snapshot    string         `json:"snapshot"`
	Ranges      int            `json:"ranges"`
	IPv4        int            `json:"ipv4"`
	IPv6        int            `json:"ipv6"`
	Unary       int            `json:"unary"`
	ByDepth     []int          `json:"by_depth"`
	MaxDepth    int            `json:"max_depth"`
	ByLayer     map[string]int `json:"by_source"`
	Orgs        int            `json:"organisations"`
	Registries  []string       `json:"registries"`
	MemoryBytes int64          `json:"memory_bytes"`
	BytesPerRng float64        `json:"memory_bytes_per_range"`
	Built       string         `json:"built,omitempty"`
	BuildTimeMS int64          `json:"build_time_ms"`
	LoadTimeMS  int64          `json:"load_time_ms"`
	Sources     []string       `json:"sources"`
}

func subnetStats(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet stats", "[flags]", stderr)
	snap := fs.String("snapshot", "", "read the hierarchy from `FILE` (default: the built-in snapshot)")
	asJSON := fs.Bool("json", false, "print the statistics as one JSON object")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	t0 := time.Now()
	t, err := loadSnapshot(*snap)
	if err != nil {
		return err
	}
	load := time.Since(t0)
	s := t.Stats()
	m := t.Meta()
	j := jsonStats{
		Snapshot: t.ID().String(), Ranges: s.Ranges, IPv4: s.IPv4, IPv6: s.IPv6, Unary: s.Unary,
		ByDepth: s.ByDepth, MaxDepth: s.MaxDepth, ByLayer: map[string]int{}, Orgs: s.Orgs,
		Registries: s.Registries, MemoryBytes: s.MemoryBytes,
		BuildTimeMS: m.BuildTime.Milliseconds(), LoadTimeMS: load.Milliseconds(), Sources: m.Sources,
	}
	if s.Ranges > 0 {
		j.BytesPerRng = float64(s.MemoryBytes) / float64(s.Ranges)
	}
	if !m.Built.IsZero() {
		j.Built = m.Built.Format(time.RFC3339)
	}
	for l := subnet.LayerIANA; l <= subnet.LayerASN; l++ {
		j.ByLayer[l.String()] = s.ByLayer[l]
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(j)
	}
	fmt.Fprintf(stdout, "snapshot      %s\n", j.Snapshot)
	if j.Built != "" {
		fmt.Fprintf(stdout, "built         %s in %v\n", j.Built, m.BuildTime.Round(time.Millisecond))
	}
	fmt.Fprintf(stdout, "loaded in     %v\n", load.Round(time.Millisecond))
	fmt.Fprintf(stdout, "ranges        %d (IPv4 %d, IPv6 %d, unary %d)\n", s.Ranges, s.IPv4, s.IPv6, s.Unary)
	fmt.Fprintf(stdout, "organisations %d\n", s.Orgs)
	fmt.Fprintf(stdout, "registries    %s\n", strings.Join(s.Registries, " "))
	fmt.Fprintf(stdout, "memory        %s (%.1f bytes per range)\n", humanBytes(s.MemoryBytes), j.BytesPerRng)
	fmt.Fprintf(stdout, "max depth     %d\n", s.MaxDepth)
	fmt.Fprintln(stdout, "by depth:")
	for d, n := range s.ByDepth {
		fmt.Fprintf(stdout, "  %2d  %d\n", d, n)
	}
	fmt.Fprintln(stdout, "by source:")
	names := make([]string, 0, len(j.ByLayer))
	for k := range j.ByLayer {
		names = append(names, k)
	}
	sort.Slice(names, func(a, b int) bool { return j.ByLayer[names[a]] > j.ByLayer[names[b]] })
	for _, k := range names {
		fmt.Fprintf(stdout, "  %-5s %d\n", k, j.ByLayer[k])
	}
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
