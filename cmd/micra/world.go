package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/micra-net/micra/internal/world"
)

// worldUsage is the usage of micra world.
const worldUsage = `Usage: micra world <command> [arguments]

Commands:
  gen   --out DIR [--seed N] [--sites M] [--nodes K] [--from-real | --geo FILE] [flags]
        generate an emulated Internet: DIR/world.json and registry files
  serve [--scale F] [--hostile] [--port P] DIR
        serve the world in DIR on loopback until interrupted
  rtt   DIR [SITE...]
        print the true RTT from every node to sites, and the optimal node

Everything binds inside 127.0.0.0/8. The latencies are the real RTT matrix
of the data directory (--data, $MICRA_DATA, or shared/data beside the
checkout) when it is found, else the embedded latency model; --latency
chooses.`

// worldCommands are the subcommands of micra world.
var worldCommands = []subcommand{
	{"gen", worldGen},
	{"serve", worldServe},
	{"rtt", worldRTT},
}

func worldGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	p := world.DefaultParams()
	fs := newFlagSet("world gen", "--out DIR [flags]", stderr)
	out := fs.String("out", "", "write the world to `DIR` (created)")
	fs.Int64Var(&p.Seed, "seed", p.Seed, "random seed: the same seed and flags give the same world, byte for byte")
	fs.IntVar(&p.Sites, "sites", p.Sites, "number of web sites")
	fs.IntVar(&p.Nodes, "nodes", p.Nodes, "number of volunteer node addresses")
	fs.BoolVar(&p.FromReal, "from-real", p.FromReal, "derive the allocations from the real RIR and ip2asn data (the built-in snapshot's without the data directory)")
	fs.StringVar(&p.Geo, "geo", "", "draw the sites from the geolocation CSV `FILE`, at their real places in the real hierarchy's shape (not with --from-real)")
	fs.StringVar(&p.DataDir, "data", "", "data `DIR` (default: $MICRA_DATA or shared/data beside the checkout)")
	latencyFlag(fs, &p.Latency)
	fs.IntVar(&p.Port, "port", p.Port, "port of every site and of the DNS server")
	fs.IntVar(&p.Hostile, "hostile", p.Hostile, "number of hostile sites (hostile only when served with --hostile)")
	fs.IntVar(&p.MaxDepth, "max-depth", p.MaxDepth, "deepest level of the registry hierarchy, 4 to 8")
	fs.Float64Var(&p.International, "international", p.International, "fraction of organisations with subnets far apart")
	fs.Float64Var(&p.AdjacentFar, "adjacent-far", p.AdjacentFar, "fraction of customer subnets placed far from their parent")
	fs.Float64Var(&p.OtherCity, "other-city", p.OtherCity, "fraction of customer subnets placed in another city of their parent's country")
	fs.Float64Var(&p.SharedHosting, "shared-hosting", p.SharedHosting, "fraction of sites in shared-hosting subnets")
	fs.IntVar(&p.SitesPerAddr, "sites-per-addr", p.SitesPerAddr, "sites sharing one address in shared hosting")
	fs.Float64Var(&p.CDN, "cdn", p.CDN, "fraction of CDN-like sites")
	fs.IntVar(&p.MeanPages, "mean-pages", p.MeanPages, "mean pages per site")
	fs.DurationVar(&p.ChangePeriod, "change-period", p.ChangePeriod, "median period of changing pages")
	fs.Float64Var(&p.Jitter, "jitter", p.Jitter, "multiplier of the per-request RTT jitter (0: none)")
	if err := parseArgs(fs, args, func(n int) bool { return *out != "" && n == 0 }, "world gen needs --out DIR and no arguments"); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	start := time.Now()
	w, err := world.Generate(ctx, p)
	if err != nil {
		return err
	}
	if err := w.Write(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "generated %d sites and %d nodes (seed %d%s) in %v; latencies: %s\n", len(w.Sites()), len(w.Nodes()), p.Seed,
		map[bool]string{true: ", from real data", false: ""}[p.FromReal || p.Geo != ""], time.Since(start).Round(time.Millisecond), w.DescribeLatency())
	fmt.Fprintf(stdout, "wrote %s and %d registry files in %s\n", filepath.Join(*out, world.SpecFile), len(w.Registry()), filepath.Join(*out, world.RegistryDir))
	return nil
}

func worldServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("world serve", "[flags] DIR", stderr)
	scale := fs.Float64("scale", 1, "multiply every injected delay by `F` (0.1 runs ten times faster; 0: no delays)")
	hostile := fs.Bool("hostile", false, "start with the hostile sites misbehaving")
	port := fs.Int("port", -1, "serve on this port instead of the spec's (0: any free port)")
	data := fs.String("data", "", "data `DIR` (default: $MICRA_DATA or shared/data beside the checkout)")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := parseArgs(fs, args, exactly(1), "world serve needs one DIR"); err != nil {
		return err
	}
	dir := fs.Arg(0)
	w, err := world.Load(ctx, dir, *data)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("subsystem", "world")
	opts := []world.Option{world.TimeScale(*scale), world.Hostile(*hostile), world.Logger(logger)}
	if *port >= 0 {
		opts = append(opts, world.Port(*port))
	}
	run, err := w.Start(ctx, opts...)
	if err != nil {
		return err
	}
	p := w.Params()
	fmt.Fprintf(stdout, "world %s: seed %d, %d sites, %d nodes, port %d, time scale %v, hostile %v; latencies: %s\n",
		dir, p.Seed, len(w.Sites()), len(w.Nodes()), run.Port(), *scale, *hostile, w.DescribeLatency())
	fmt.Fprintf(stdout, "dns %s\n", run.DNS())
	fmt.Fprintln(stdout, "registry files (load with \"micra subnet import\"):")
	abs, _ := filepath.Abs(dir)
	for _, f := range w.Registry() {
		fmt.Fprintf(stdout, "  %s\n", filepath.Join(abs, world.RegistryDir, f.Name))
	}
	fmt.Fprintln(stdout, "nodes (bind outgoing connections to these addresses):")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, n := range w.Nodes() {
		fmt.Fprintf(tw, "  %s\t%s, %s\t%s\t%s\n", n.Addr, n.Loc.City, n.Loc.Country, n.Subnet, n.Org)
	}
	tw.Flush()
	sites := w.Sites()
	fmt.Fprintf(stdout, "sites: %d, e.g. %s\n", len(sites), run.URL(sites[0]))
	fmt.Fprintln(stdout, "serving until interrupted")
	<-ctx.Done()
	return run.Close()
}

func worldRTT(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("world rtt", "[flags] DIR [SITE...]", stderr)
	data := fs.String("data", "", "data `DIR` (default: $MICRA_DATA or shared/data beside the checkout)")
	if err := parseArgs(fs, args, atLeast(1), "world rtt needs DIR"); err != nil {
		return err
	}
	w, err := world.Load(ctx, fs.Arg(0), *data)
	if err != nil {
		return err
	}
	var sites []world.Site
	if fs.NArg() == 1 {
		all := w.Sites()
		sites = all[:min(10, len(all))]
	}
	for _, name := range fs.Args()[1:] {
		s, ok := w.Site(name)
		if !ok {
			if a, err := netip.ParseAddr(name); err == nil {
				if ss := w.SitesAt(a); len(ss) > 0 {
					s, ok = ss[0], true
				}
			}
		}
		if !ok {
			return fmt.Errorf("%w: %s", world.ErrUnknownSite, name)
		}
		sites = append(sites, s)
	}
	nodes := w.Nodes()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "site\tplace\t")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t", n.Addr)
	}
	fmt.Fprintln(tw, "optimal\t")
	for _, s := range sites {
		fmt.Fprintf(tw, "%s\t%s, %s\t", s.Name, s.Loc.City, s.Loc.Country)
		for _, n := range nodes {
			fmt.Fprintf(tw, "%.1f\t", float64(w.RTT(n.Addr, s))/1e6)
		}
		best, rtt, _ := w.Optimal(s, w.NodeAddrs())
		fmt.Fprintf(tw, "%s (%.1f ms)\t\n", best, float64(rtt)/1e6)
	}
	return tw.Flush()
}

// latencyFlag adds --latency, where an emulated Internet's RTTs come from
// (world.Params.Latency), to fs.
func latencyFlag(fs *flag.FlagSet, v *string) {
	fs.Func("latency", "where the emulated Internet's RTTs come from: `matrix` (the real WonderProxy matrix in the data directory) or model (the embedded model fitted to it); default: the matrix when the data directory has it, else the model",
		func(s string) error {
			if s != world.LatencyMatrix && s != world.LatencyModel {
				return fmt.Errorf("want %q or %q", world.LatencyMatrix, world.LatencyModel)
			}
			*v = s
			return nil
		})
}
