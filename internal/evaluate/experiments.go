package evaluate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// Result is the outcome of one strategy, node count and threshold in the
// training-split experiment, averaged over the seeds.
type Result struct {
	Strategy    string  `json:"strategy"`
	Nodes       int     `json:"nodes"`
	ThresholdMS float64 `json:"threshold_ms"` // 0 for strategies that use none
	Seeds       int     `json:"seeds"`
	Stats               // means over the seeds
	Std         Stats   `json:"std"` // sample standard deviations over the seeds
	// PooledExcessMS is the mean excess RTT of the sub-optimal delegations
	// of all the seeds together. The mean over the seeds of each seed's
	// mean (ExcessMS) gives a seed with one sub-optimal delegation that
	// one's excess as its mean: a single site can carry it.
	PooledExcessMS float64 `json:"pooled_excess_ms"`
	SetupProbes    float64 `json:"setup_probes"` // probes spent before delegating (HiMicra's hierarchy)
}

// usesThreshold reports whether a strategy's behaviour depends on the
// probing threshold.
func usesThreshold(name string) bool { return name == IPMicra || name == Guided || name == HiMicra }

// Split runs the training-split experiment of thesis 8.6: for every seed
// and node count, the sites are shuffled, the first TrainFraction of them
// delegated optimally, and the rest delegated by each strategy, starting
// from the same trained table each time.
func Split(ctx context.Context, w World, tree *subnet.Tree, p Prober, cfg Config) ([]Result, error) {
	sites := evalSites(w)
	if len(sites) == 0 {
		return nil, errNoSites
	}
	strategies := cfg.Strategies
	if len(strategies) == 0 {
		strategies = AllStrategies
	}
	type key struct {
		strategy string
		nodes    int
		th       time.Duration
	}
	perSeed := map[key][]Stats{}
	setup := map[key][]float64{}
	var order []key
	for _, seed := range cfg.Seeds {
		for _, k := range cfg.Nodes {
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(k)))
			nodes, err := pickNodes(w, k, rng)
			if err != nil {
				return nil, err
			}
			shuffled := append([]world.Site(nil), sites...)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			nTrain := int(cfg.TrainFraction * float64(len(shuffled)))
			train, test := shuffled[:nTrain], shuffled[nTrain:]
			sample := train[:min(cfg.HiMicraSample, len(train))]
			for _, name := range strategies {
				ths := cfg.Thresholds
				if !usesThreshold(name) {
					ths = []time.Duration{0}
				}
				for _, th := range ths {
					e, err := newEnv(w, tree, nodes, p)
					if err != nil {
						return nil, err
					}
					e.configure(cfg)
					for _, s := range train {
						if err := e.train(ctx, s); err != nil {
							return nil, err
						}
					}
					st, setupProbes, err := e.strategy(ctx, name, th, rand.New(rand.NewPCG(uint64(seed), 99)), sample, cfg.Branching)
					if err != nil {
						return nil, err
					}
					var out []Outcome
					for _, s := range test {
						o, err := e.delegate(ctx, st, s)
						if err != nil {
							return nil, fmt.Errorf("%s, %d nodes, seed %d: %w", name, k, seed, err)
						}
						out = append(out, o)
					}
					kk := key{name, k, th}
					if _, seen := perSeed[kk]; !seen {
						order = append(order, kk)
					}
					perSeed[kk] = append(perSeed[kk], Summarise(out))
					setup[kk] = append(setup[kk], float64(setupProbes))
				}
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	var results []Result
	for _, kk := range order {
		r := Result{Strategy: kk.strategy, Nodes: kk.nodes, ThresholdMS: ms(kk.th), Seeds: len(perSeed[kk])}
		r.Stats, r.Std = aggregate(perSeed[kk])
		r.PooledExcessMS = pooled(perSeed[kk])
		r.SetupProbes, _ = meanStd(setup[kk])
		results = append(results, r)
	}
	return results, nil
}

// pooled returns the mean excess of the sub-optimal delegations of ss
// together.
func pooled(ss []Stats) float64 {
	sum, n := 0.0, 0
	for _, s := range ss {
		sum += s.ExcessMS * float64(s.Suboptimal)
		n += s.Suboptimal
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// aggregate returns the means and standard deviations of per-seed stats.
func aggregate(ss []Stats) (mean, std Stats) {
	col := func(f func(Stats) float64) (float64, float64) {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		return meanStd(xs)
	}
	var u, n float64
	u, _ = col(func(s Stats) float64 { return float64(s.URLs) })
	n, _ = col(func(s Stats) float64 { return float64(s.New) })
	mean.URLs, mean.New = int(u+0.5), int(n+0.5)
	sub, _ := col(func(s Stats) float64 { return float64(s.Suboptimal) })
	mean.Suboptimal = int(sub + 0.5)
	sp, _ := col(func(s Stats) float64 { return float64(s.Splits) })
	mean.Splits = int(sp + 0.5)
	mean.OptimalPct, std.OptimalPct = col(func(s Stats) float64 { return s.OptimalPct })
	mean.ProbesPerURL, std.ProbesPerURL = col(func(s Stats) float64 { return s.ProbesPerURL })
	mean.ProbesPerNew, std.ProbesPerNew = col(func(s Stats) float64 { return s.ProbesPerNew })
	mean.ExcessMS, std.ExcessMS = col(func(s Stats) float64 { return s.ExcessMS })
	mean.ExcessPerURLMS, std.ExcessPerURLMS = col(func(s Stats) float64 { return s.ExcessPerURLMS })
	mean.MeanRTTMS, std.MeanRTTMS = col(func(s Stats) float64 { return s.MeanRTTMS })
	return mean, std
}

// Curve is the progressive-learning run of one threshold (thesis 7.7,
// figures 7.3 to 7.5): the probes each site needed, in order, from a clean
// start, and the least-squares trend of probes per site.
type Curve struct {
	ThresholdMS float64 `json:"threshold_ms"`
	Nodes       int     `json:"nodes"`
	Probes      []int   `json:"probes"`
	Slope       float64 `json:"slope"`     // probes per site per site delegated
	Intercept   float64 `json:"intercept"` // probes per site at the start of the trend
	First300    float64 `json:"first_300"` // mean probes per site over the first 300 sites
	Last50      float64 `json:"last_50"`   // mean probes per site over the last 50 sites
	Stats       Stats   `json:"stats"`
}

// Progressive delegates up to cfg.Progressive sites one after the other
// with IPMicra from a clean start (only the nodes' own subnets delegated)
// for each threshold, with nodes nodes, and returns the curves.
func Progressive(ctx context.Context, w World, tree *subnet.Tree, p Prober, nodes int, seed int64, cfg Config) ([]Curve, error) {
	sites := evalSites(w)
	if len(sites) == 0 {
		return nil, errNoSites
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(nodes)))
	addrs, err := pickNodes(w, nodes, rng)
	if err != nil {
		return nil, err
	}
	rng.Shuffle(len(sites), func(i, j int) { sites[i], sites[j] = sites[j], sites[i] })
	sites = sites[:min(len(sites), cfg.Progressive)]
	var curves []Curve
	for _, th := range cfg.Thresholds {
		e, err := newEnv(w, tree, addrs, p)
		if err != nil {
			return nil, err
		}
		e.configure(cfg)
		st, _, err := e.strategy(ctx, IPMicra, th, rng, nil, cfg.Branching)
		if err != nil {
			return nil, err
		}
		c := Curve{ThresholdMS: ms(th), Nodes: nodes}
		var out []Outcome
		for _, s := range sites {
			o, err := e.delegate(ctx, st, s)
			if err != nil {
				return nil, err
			}
			out = append(out, o)
			c.Probes = append(c.Probes, o.Probes)
		}
		c.Stats = Summarise(out)
		c.Slope, c.Intercept = trend(c.Probes)
		c.First300 = meanOf(c.Probes[:min(300, len(c.Probes))])
		c.Last50 = meanOf(c.Probes[max(0, len(c.Probes)-50):])
		curves = append(curves, c)
	}
	return curves, nil
}

// trend fits probes[i] ≈ intercept + slope·i by least squares.
func trend(ys []int) (slope, intercept float64) {
	n := float64(len(ys))
	if n < 2 {
		return 0, meanOf(ys)
	}
	var sx, sy, sxx, sxy float64
	for i, y := range ys {
		x := float64(i)
		sx += x
		sy += float64(y)
		sxx += x * x
		sxy += x * float64(y)
	}
	slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return slope, (sy - slope*sx) / n
}

func meanOf(ys []int) float64 {
	if len(ys) == 0 {
		return 0
	}
	s := 0
	for _, y := range ys {
		s += y
	}
	return float64(s) / float64(len(ys))
}
