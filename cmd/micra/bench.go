package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/world"
)

// benchCommands are the benchmarks of micra bench.
var benchCommands = []subcommand{
	{"delegation", benchDelegation},
	{"structure", benchStructure},
	{"crawl", benchCrawl},
	{"overlay", benchOverlay},
	{"footprint", benchFootprint},
	{"liars", benchLiars},
	{"search", benchSearch},
}

// benchUsage is the run of micra bench without the name of a benchmark.
func benchUsage(_ context.Context, args []string, _, stderr io.Writer) error {
	names := subNames(benchCommands)
	fmt.Fprintf(stderr, "Usage: micra bench %s [flags]   (run with -h for the flags)\n", strings.Join(names, "|"))
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		return nil
	}
	last := len(names) - 1
	return fmt.Errorf("%w: want a benchmark name: %s or %s", errUsage, strings.Join(names[:last], ", "), names[last])
}

// intList parses "6,12,25".
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// dbipAttribution is the credit DB-IP's licence (CC BY 4.0) asks for
// wherever results derived from its data are shown.
const dbipAttribution = "IP Geolocation by DB-IP (https://db-ip.com), CC BY 4.0"

// attributionFor returns the credit the geolocation file at path asks
// for: dbipAttribution for DB-IP's, else none.
func attributionFor(path string) string {
	if strings.Contains(strings.ToLower(path), "dbip") {
		return dbipAttribution
	}
	return ""
}

// benchOutputs says how a benchmark prints its results (as JSON or as
// text) and where it writes them besides ("": not).
type benchOutputs struct {
	asJSON     bool
	csv, plot  string // files of a CSV table and a PNG plot
	cpuProfile string // a CPU profile of the run (--cpuprofile)
}

// finish writes the CSV and the plot asked for through writeCSV and
// writePlot, sets *elapsed to the seconds since start, and prints rep:
// as JSON with --json, else as its text.
func (o benchOutputs) finish(stdout io.Writer, start time.Time, elapsed *float64, rep interface{ WriteText(io.Writer) error }, writeCSV, writePlot func(io.Writer) error) error {
	if o.csv != "" {
		if err := writeFile(o.csv, writeCSV); err != nil {
			return err
		}
	}
	if o.plot != "" {
		if err := writeFile(o.plot, writePlot); err != nil {
			return err
		}
	}
	*elapsed = time.Since(start).Seconds()
	if o.asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	return rep.WriteText(stdout)
}

// benchDelegation runs evaluate.RunDelegationBench and prints its report.
func benchDelegation(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	b, out, err := parseBenchDelegation(args, stderr)
	if err != nil {
		return err
	}
	if out.cpuProfile != "" {
		stop, err := profileCPU(out.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	start := time.Now()
	b.Log = stderr
	rep, err := evaluate.RunDelegationBench(ctx, b)
	if err != nil {
		return err
	}
	return out.finish(stdout, start, &rep.Elapsed, &rep, func(f io.Writer) error { return evaluate.WriteCSV(f, rep.Results) },
		func(f io.Writer) error { return evaluate.Plot(f, rep.Results, rep.Progressive) })
}

// parseBenchDelegation parses bench delegation's flags.
func parseBenchDelegation(args []string, stderr io.Writer) (evaluate.DelegationBench, benchOutputs, error) {
	var b evaluate.DelegationBench
	var out benchOutputs
	fs := newFlagSet("bench delegation", "[flags]", stderr)
	seed := fs.Int64("seed", 1, "first `seed`: of the world (unless --world) and of the repetitions")
	repeats := fs.Int("repeats", 5, "repetitions with seeds seed, seed+1, ...: node subsets and site orders differ")
	nodesFlag := fs.String("nodes", "6,12,25,50", "node counts to evaluate, comma-separated")
	thFlag := fs.String("threshold", "25,50,75,100", "probing thresholds in ms, comma-separated")
	stratFlag := fs.String("strategies", strings.Join(evaluate.AllStrategies, ","), "strategies: "+strings.Join(evaluate.AllStrategies, ", "))
	worldDir := fs.String("world", "", "evaluate the world written by \"micra world gen\" in `DIR` (default: generate one)")
	geoFile := fs.String("geo", "", "evaluate on real structure: sites are real addresses from the geolocation CSV `FILE` (prefix or ipv4, latitude, longitude columns; gzip or plain), in the built-in real hierarchy, at their coordinates, with the real RTT matrix")
	strict := fs.Bool("strict", false, "with --geo: a malformed row is an error, not skipped")
	org := fs.String("org", "", "with --geo: only the rows whose organisation in the real hierarchy has a name containing `TEXT` (one organisation's prefixes, e.g. Amazon)")
	sites := fs.Int("sites", 1000, "sites of a generated world; with --geo, rows sampled from the file")
	fromReal := fs.Bool("from-real", true, "derive a generated world's allocation structure from the real RIR and ip2asn data (the built-in snapshot's when the data directory is not found)")
	dataDir := fs.String("data", "", "the shared data `DIR` (default: ../shared/data or $MICRA_DATA)")
	var latency string
	latencyFlag(fs, &latency)
	train := fs.Float64("train", 0.65, "share of the sites delegated optimally before the others are delegated by each strategy (thesis 8.6); 0: a cold start, as a new network")
	progressive := fs.Int("progressive", 1000, "sites in the progressive-learning run (0 skips it)")
	sf := addSearchFlags(fs)
	split := fs.Int("split", 10, "delegate parts of registry ranges apart: a site its range's holder measures more than `MS` slower than its probe of the range has the part holding it searched apart (0: whole ranges, as the paper)")
	probes := fs.String("probes", evaluate.ProbesModel, "what a probe answers: model (the true mean RTT) or jitter (the least of 3 samples of the world's per-request jitter, as a timed probe measures)")
	fs.BoolVar(&out.asJSON, "json", false, "print the results as one JSON object")
	fs.StringVar(&out.csv, "csv", "", "write the results as CSV to `FILE`")
	fs.StringVar(&out.plot, "plot", "", "write a PNG plot to `FILE`")
	fs.StringVar(&out.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof reads it)")
	if err := parseNoArgs(fs, args); err != nil {
		return b, out, err
	}
	cfg := evaluate.DefaultConfig()
	var err error
	if cfg.Nodes, err = intList(*nodesFlag); err != nil {
		return b, out, fmt.Errorf("%w: --nodes: %v", errUsage, err)
	}
	ths, err := intList(*thFlag)
	if err != nil {
		return b, out, fmt.Errorf("%w: --threshold: %v", errUsage, err)
	}
	cfg.Thresholds = nil
	for _, t := range ths {
		cfg.Thresholds = append(cfg.Thresholds, time.Duration(t)*time.Millisecond)
	}
	cfg.Strategies = strings.Split(*stratFlag, ",")
	for _, s := range cfg.Strategies {
		if !slices.Contains(evaluate.AllStrategies, s) {
			return b, out, fmt.Errorf("%w: --strategies: unknown %q", errUsage, s)
		}
	}
	if *probes != evaluate.ProbesModel && *probes != evaluate.ProbesJitter {
		return b, out, fmt.Errorf("%w: --probes must be model or jitter, got %q", errUsage, *probes)
	}
	if *repeats <= 0 {
		return b, out, fmt.Errorf("%w: --repeats must be positive", errUsage)
	}
	cfg.Seeds = nil
	for i := 0; i < *repeats; i++ {
		cfg.Seeds = append(cfg.Seeds, *seed+int64(i))
	}
	cfg.Progressive = *progressive
	if *split < 0 {
		return b, out, fmt.Errorf("%w: --split must not be negative", errUsage)
	}
	cfg.Split = time.Duration(*split) * time.Millisecond
	if err := sf.apply(&cfg); err != nil {
		return b, out, err
	}
	if *train < 0 || *train > 0.95 {
		return b, out, fmt.Errorf("%w: --train %v must lie in [0, 0.95]", errUsage, *train)
	}
	cfg.TrainFraction = *train
	if *geoFile != "" && *worldDir != "" {
		return b, out, fmt.Errorf("%w: --geo and --world exclude each other", errUsage)
	}
	if *org != "" && *geoFile == "" {
		return b, out, fmt.Errorf("%w: --org needs --geo", errUsage)
	}
	b = evaluate.DelegationBench{Config: cfg, Seed: *seed, Probes: *probes, Dir: *worldDir, Data: *dataDir, Attribution: attributionFor(*geoFile),
		Geo: evaluate.GeoConfig{Path: *geoFile, Sites: *sites, Strict: *strict, Seed: *seed, Nodes: slices.Max(cfg.Nodes), DataDir: *dataDir, Org: *org, Latency: latency}}
	b.Params = world.DefaultParams()
	b.Params.Seed, b.Params.Sites, b.Params.Nodes, b.Params.FromReal, b.Params.DataDir, b.Params.Latency = *seed, *sites, slices.Max(cfg.Nodes), *fromReal, *dataDir, latency
	return b, out, nil
}

// printJSON writes v to w as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeFile writes a file through f, atomically.
func writeFile(path string, f func(io.Writer) error) error {
	tmp := path + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := f(fh); err != nil {
		fh.Close()
		os.Remove(tmp)
		return err
	}
	if err := fh.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// mapFlag is --map: a boolean flag (--map: the matrix's map) that also
// takes --map=matrix or --map=measured.
type mapFlag string

func (m *mapFlag) String() string   { return string(*m) }
func (m *mapFlag) IsBoolFlag() bool { return true }

func (m *mapFlag) Set(v string) error {
	switch v {
	case "true", "matrix":
		*m = "matrix"
	case "false", "":
		*m = ""
	case "measured":
		*m = "measured"
	default:
		return fmt.Errorf("%q is not matrix or measured", v)
	}
	return nil
}

// searchFlags are bench delegation's settings of the guided search: its
// latency map, the noise of the inter-node RTTs it sees, its tolerance.
type searchFlags struct {
	useMap              mapFlag
	mapError            *float64
	rttNoise, rttJitter *float64
	rttKnown            *float64
	tolerance           *string
}

func addSearchFlags(fs *flag.FlagSet) *searchFlags {
	sf := &searchFlags{}
	fs.Var(&sf.useMap, "map", "give the guided search a latency map: --map (or --map=matrix) nodes know their own locations and the public RTT matrix, and estimate their access delays from the RTTs between them; --map=measured only the RTTs the nodes measure between themselves, every node a place")
	sf.mapError = fs.Float64("map-error", 0, "with --map, the map's error: every RTT of the map is multiplied by e^x, x normal with standard deviation `SD` (0.1: about ±10 %)")
	sf.rttNoise = fs.Float64("rtt-noise", 0, "the inter-node RTTs the guided search sees are multiplied by e^x, x normal with standard deviation `SD`, once per pair (0.05: about ±5 %)")
	sf.rttJitter = fs.Float64("rtt-jitter", 0, "and have |x| added, x normal with standard deviation `MS` milliseconds")
	sf.rttKnown = fs.Float64("rtt-known", 1, "the share of inter-node pairs whose RTT the guided search knows, drawn once per pair (a running coordinator's map of measured RTTs lacks some: bench overlay logs how many)")
	sf.tolerance = fs.String("tolerance", "", "the guided search asks a node only if it may beat the best answer by more than `MS` milliseconds; density: an eighth of the median RTT between neighbouring nodes, within 2 ms and a fifth of the threshold (default: a fifth of the threshold)")
	return sf
}

// apply checks the flags and sets them in cfg.
func (sf *searchFlags) apply(cfg *evaluate.Config) error {
	if *sf.mapError < 0 || *sf.mapError > 2 {
		return fmt.Errorf("%w: --map-error %v must lie in [0, 2]", errUsage, *sf.mapError)
	}
	if *sf.rttNoise < 0 || *sf.rttNoise > 2 || *sf.rttJitter < 0 || *sf.rttJitter > 1000 {
		return fmt.Errorf("%w: --rtt-noise %v must lie in [0, 2] and --rtt-jitter %v in [0, 1000]", errUsage, *sf.rttNoise, *sf.rttJitter)
	}
	cfg.Map, cfg.MeasuredMap, cfg.MapError = sf.useMap != "", sf.useMap == "measured", *sf.mapError
	cfg.RTTNoise, cfg.RTTJitter = *sf.rttNoise, time.Duration(*sf.rttJitter*float64(time.Millisecond))
	if !(*sf.rttKnown > 0 && *sf.rttKnown <= 1) {
		return fmt.Errorf("%w: --rtt-known %v must lie in (0, 1]", errUsage, *sf.rttKnown)
	}
	cfg.RTTKnown = *sf.rttKnown
	switch *sf.tolerance {
	case "":
	case "density":
		cfg.Density = true
	default:
		ms, err := strconv.ParseFloat(*sf.tolerance, 64)
		if err != nil || !(ms > 0 && ms <= 1000) {
			return fmt.Errorf("%w: --tolerance %q is neither density nor milliseconds in (0, 1000]", errUsage, *sf.tolerance)
		}
		cfg.Tolerance = time.Duration(ms * float64(time.Millisecond))
	}
	return nil
}
