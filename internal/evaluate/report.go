package evaluate

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Paper is one published figure of the IPMicra evaluation (thesis 8.6,
// 12 real crawlers and 350 test URLs unless said otherwise).
type Paper struct {
	Strategy     string
	Nodes        int
	ThresholdMS  float64
	OptimalPct   float64 // -1 when not published
	ProbesPerURL float64
	ExcessMS     float64 // -1 when not published
	// ExcessPerURLMS is the excess over every URL, derived from the
	// published optimal share and excess (-1 when either is missing).
	ExcessPerURLMS float64
	Note           string
}

// Published lists the paper's figures that micra's results are set beside.
var Published = []Paper{
	{IPMicra, 12, 25, 90, 2051.0 / 350, 5.6, 5.6 * 37 / 350, "thesis 8.6: 313/350 optimal, 2051 probes"},
	{IPMicra, 12, 50, 75, 1048.0 / 350, 13, 13.0 * 89 / 350, "thesis 8.6 and paper IV: 261/350 optimal, 1048 probes"},
	{IPMicra, 12, 100, 53, 617.0 / 350, 29.9, 29.9 * 163 / 350, "thesis 8.6: 187/350 optimal, 617 probes"},
	{IPMicra, 6, 25, -1, 0.67 * 6, -1, -1, "thesis table 8.3: 67 % of brute force's probes"},
	{IPMicra, 6, 50, -1, 0.45 * 6, -1, -1, "thesis table 8.3: 45 % of brute force's probes"},
	{Brute, 12, 0, 100, 12, 0, 0, "thesis 8.6: 12 × 350 = 4200 probes"},
	{HiMicra, 12, 50, -1, 6, -1, -1, "thesis 8.5: about half of brute force's probes"},
}

// published returns the paper's figure for a result, if any.
func published(r Result) (Paper, bool) {
	for _, p := range Published {
		if p.Strategy == r.Strategy && p.Nodes == r.Nodes && p.ThresholdMS == r.ThresholdMS {
			return p, true
		}
	}
	return Paper{}, false
}

// WriteTable prints the split results with the paper's figures beside.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tnodes\tthreshold ms\toptimal %\tprobes/URL\tprobes/new subnet\texcess ms\tpooled\texcess/URL ms\tnew/URLs\t\tpaper: optimal %\tprobes/URL\texcess ms\texcess/URL\t")
	for _, r := range results {
		th := "-"
		if r.ThresholdMS > 0 {
			th = strconv.FormatFloat(r.ThresholdMS, 'f', 0, 64)
		}
		paper := "\t\t\t\t"
		if p, ok := published(r); ok {
			paper = fmt.Sprintf("%s\t%.2f\t%s\t%s\t", orDash(p.OptimalPct, "%.0f"), p.ProbesPerURL, orDash(p.ExcessMS, "%.1f"), orDash(p.ExcessPerURLMS, "%.2f"))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f ±%.1f\t%.2f ±%.2f\t%.2f ±%.2f\t%.1f ±%.1f\t%.1f\t%.2f ±%.2f\t%d/%d\t\t%s\n",
			r.Strategy, r.Nodes, th, r.OptimalPct, r.Std.OptimalPct, r.ProbesPerURL, r.Std.ProbesPerURL,
			r.ProbesPerNew, r.Std.ProbesPerNew, r.ExcessMS, r.Std.ExcessMS, r.PooledExcessMS, r.ExcessPerURLMS, r.Std.ExcessPerURLMS, r.New, r.URLs, paper)
	}
	return tw.Flush()
}

func orDash(v float64, format string) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// WriteCurves prints the progressive-learning summaries.
func WriteCurves(w io.Writer, curves []Curve) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "threshold ms\tnodes\tsites\tprobes/site\tfirst 300\tlast 50\ttrend slope\toptimal %\t")
	for _, c := range curves {
		fmt.Fprintf(tw, "%.0f\t%d\t%d\t%.2f\t%.2f\t%.2f\t%+.5f\t%.1f\t\n",
			c.ThresholdMS, c.Nodes, len(c.Probes), c.Stats.ProbesPerURL, c.First300, c.Last50, c.Slope, c.Stats.OptimalPct)
	}
	fmt.Fprintln(tw, "paper (thesis 8.6, 50 ms):\t12\t350\t2.99\t3.05\t2.66\t<0\t75\t")
	return tw.Flush()
}

// WriteCSV writes the split results, one row per strategy, node count and
// threshold.
func WriteCSV(w io.Writer, results []Result) error {
	f := csvFloat
	rows := make([][]string, 0, len(results))
	for _, r := range results {
		rows = append(rows, []string{r.Strategy, strconv.Itoa(r.Nodes), f(r.ThresholdMS), strconv.Itoa(r.Seeds),
			strconv.Itoa(r.URLs), strconv.Itoa(r.New), f(r.OptimalPct), f(r.Std.OptimalPct), f(r.ProbesPerURL),
			f(r.Std.ProbesPerURL), f(r.ProbesPerNew), f(r.Std.ProbesPerNew), f(r.ExcessMS), f(r.Std.ExcessMS),
			f(r.MeanRTTMS), f(r.SetupProbes), f(r.PooledExcessMS), f(r.ExcessPerURLMS), f(r.Std.ExcessPerURLMS)})
	}
	return writeCSV(w, []string{"strategy", "nodes", "threshold_ms", "seeds", "delegated", "new_subnets",
		"optimal_pct", "optimal_pct_std", "probes_per_url", "probes_per_url_std", "probes_per_new_subnet",
		"probes_per_new_subnet_std", "excess_ms", "excess_ms_std", "mean_rtt_ms", "setup_probes", "pooled_excess_ms", "excess_per_url_ms", "excess_per_url_ms_std"}, rows)
}

// writeCSV writes a header row and rows as CSV.
func writeCSV(w io.Writer, header []string, rows [][]string) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(header)
	for _, r := range rows {
		_ = cw.Write(r)
	}
	cw.Flush()
	return cw.Error()
}

// csvFloat formats v for the CSV files: four decimals.
func csvFloat(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// writePNG writes c to w as PNG.
func writePNG(w io.Writer, c *vgimg.Canvas) error {
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// Plot draws two panels as PNG: optimal delegations against probes per new
// subnet for every strategy, node count and threshold; and the
// progressive-learning curves (a moving average of probes per site, with
// their trend lines).
func Plot(w io.Writer, results []Result, curves []Curve) error {
	const width, height = 10 * vg.Inch, 4.5 * vg.Inch
	left := plot.New()
	left.Title.Text = "Delegation quality against cost"
	left.X.Label.Text = "probes per new subnet"
	left.Y.Label.Text = "optimal delegations (%)"
	palette := []color.Color{
		color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255},
		color.RGBA{148, 103, 189, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{127, 127, 127, 255},
	}
	for i, name := range AllStrategies {
		var pts plotter.XYs
		for _, r := range results {
			if r.Strategy == name {
				pts = append(pts, plotter.XY{X: r.ProbesPerNew, Y: r.OptimalPct})
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color = palette[i%len(palette)]
		sc.GlyphStyle.Radius = vg.Points(3)
		left.Add(sc)
		left.Legend.Add(name, sc)
	}
	left.Legend.Top = false
	left.Legend.Left = false

	right := plot.New()
	right.Title.Text = "Progressive learning (IPMicra)"
	right.X.Label.Text = "site"
	right.Y.Label.Text = "probes per site (moving mean of 50)"
	for i, c := range curves {
		var pts, fit plotter.XYs
		sum := 0
		for j, p := range c.Probes {
			sum += p
			if j >= 50 {
				sum -= c.Probes[j-50]
			}
			if j >= 49 {
				pts = append(pts, plotter.XY{X: float64(j), Y: float64(sum) / 50})
			}
		}
		fit = plotter.XYs{{X: 0, Y: c.Intercept}, {X: float64(len(c.Probes) - 1), Y: c.Intercept + c.Slope*float64(len(c.Probes)-1)}}
		if len(pts) == 0 {
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.Color = palette[i%len(palette)]
		tr, err := plotter.NewLine(fit)
		if err != nil {
			return err
		}
		tr.Color = palette[i%len(palette)]
		tr.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		right.Add(ln, tr)
		right.Legend.Add(fmt.Sprintf("%.0f ms", c.ThresholdMS), ln)
	}

	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	return writePNG(w, img)
}

// WriteCrawlTable writes the crawl results as an aligned text table.
func WriteCrawlTable(w io.Writer, rep CrawlReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tmode\tnodes\tpages\tMB\tdownload s\tmakespan s\tmean page ms\tp90 page ms\t× faster than random\t× oracle's time\tmodel s\tmodel × random\toptimal\t")
	for _, r := range rep.Results {
		mode := r.Mode
		if r.Depth > 0 {
			mode = fmt.Sprintf("%s, depth %d", r.Mode, r.Depth)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%s\t%s\t%.1f\t%s\t%.1f %%\t\n",
			r.Strategy, mode, r.Nodes, r.Pages, float64(r.Bytes)/1e6, r.DownloadS, r.MakespanS, r.MeanPageMS, r.P90PageMS,
			orDash(r.VsRandom, "%.2f"), orDash(r.VsOracle, "%.2f"), r.ModelS, orDash(r.ModelVsRandom, "%.2f"), r.OptimalPct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.PageSize) > 0 && len(rep.PageSize[0].VsRandom) > 0 {
		fmt.Fprintf(w, "\nThe sequential mode by the world's model with every front page scaled: × faster than random.\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "page size\tmean kB\t")
		for _, r := range rep.Results {
			if r.Mode == ModeSequential {
				fmt.Fprintf(tw, "%s\t", r.Strategy)
			}
		}
		fmt.Fprintln(tw)
		for _, m := range rep.PageSize {
			fmt.Fprintf(tw, "×%g\t%.1f\t", m.Factor, m.MeanPageKB)
			for _, r := range rep.Results {
				if r.Mode == ModeSequential {
					fmt.Fprintf(tw, "%.2f\t", m.VsRandom[r.Strategy])
				}
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if rep.AgreementN > 0 {
		_, err := fmt.Fprintf(w, "\nHEAD/GET (thesis 8.3): on %d sites the node with the smallest probe (least of %d HEADs) had the smallest download (median of %d GETs) on %.1f %%;"+
			" where not, its download took %.1f ms longer on average. One HEAD against one GET: %.1f %%.\n",
			rep.AgreementN, headGetSamples, headGetSamples, rep.AgreementPct, rep.ExtraMS, rep.SinglePct)
		return err
	}
	return nil
}

// WriteCrawlCSV writes the crawl results as CSV with a header row.
func WriteCrawlCSV(w io.Writer, rep CrawlReport) error {
	f := csvFloat
	rows := make([][]string, 0, len(rep.Results))
	for _, r := range rep.Results {
		rows = append(rows, []string{r.Strategy, r.Mode, strconv.Itoa(r.Depth), strconv.Itoa(r.Nodes), f(r.DownloadS), f(r.MakespanS), f(r.MeanPageMS), f(r.P90PageMS),
			strconv.Itoa(r.Pages), strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Failed), f(r.ModelS), f(r.VsRandom), f(r.VsOracle),
			f(r.ModelVsRandom), f(r.OptimalPct), f(r.ProbesPerSite)})
	}
	return writeCSV(w, []string{"strategy", "mode", "depth", "nodes", "download_s", "makespan_s", "mean_page_ms", "p90_page_ms", "pages", "bytes",
		"failed", "model_s", "speedup_vs_random", "ratio_to_oracle", "model_speedup_vs_random", "optimal_pct", "probes_per_site"}, rows)
}

// PlotCrawl writes a PNG bar chart of each strategy's speed-up over
// random assignment in each mode, measured and by the world's model; of
// the total download times when random was not run.
func PlotCrawl(w io.Writer, rep CrawlReport) error {
	p := plot.New()
	value := func(r CrawlResult) (measured, model float64) { return r.VsRandom, r.ModelVsRandom }
	p.Title.Text = "Crawl speed-up over random assignment (UCYMicra)"
	p.Y.Label.Text = "× faster than random (total download time)"
	if !slices.ContainsFunc(rep.Results, func(r CrawlResult) bool { return r.Strategy == Random }) {
		value = func(r CrawlResult) (float64, float64) { return r.DownloadS, r.ModelS }
		p.Title.Text = "Total download time"
		p.Y.Label.Text = "s, modelled"
	}
	var modes, names []string
	for _, r := range rep.Results {
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
		if !slices.Contains(names, r.Strategy) {
			names = append(names, r.Strategy)
		}
	}
	colours := []color.RGBA{{R: 31, G: 119, B: 180, A: 255}, {R: 174, G: 199, B: 232, A: 255}, {R: 255, G: 127, B: 14, A: 255}, {R: 255, G: 187, B: 120, A: 255}}
	width := vg.Points(12)
	series := 2 * len(modes)
	for mi, mode := range modes {
		measured, model := make(plotter.Values, len(names)), make(plotter.Values, len(names))
		for _, r := range rep.Results {
			if r.Mode == mode {
				i := slices.Index(names, r.Strategy)
				measured[i], model[i] = value(r)
			}
		}
		for k, vals := range []plotter.Values{measured, model} {
			b, err := plotter.NewBarChart(vals, width)
			if err != nil {
				return err
			}
			j := 2*mi + k
			b.Color = colours[j%len(colours)]
			b.Offset = width * vg.Length(2*j-series+1) / 2
			p.Add(b)
			p.Legend.Add(mode+[]string{", measured", ", model"}[k], b)
		}
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, p.Y.Max*1.5 // room for the legend above the bars
	p.NominalX(names...)
	c := vgimg.New(7*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	return writePNG(w, c)
}
