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
	cw := csv.NewWriter(w)
	cw.Write([]string{"strategy", "mode", "depth", "nodes", "download_s", "makespan_s", "mean_page_ms", "p90_page_ms", "pages", "bytes",
		"failed", "model_s", "speedup_vs_random", "ratio_to_oracle", "model_speedup_vs_random", "optimal_pct", "probes_per_site"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for _, r := range rep.Results {
		cw.Write([]string{r.Strategy, r.Mode, strconv.Itoa(r.Depth), strconv.Itoa(r.Nodes), f(r.DownloadS), f(r.MakespanS), f(r.MeanPageMS), f(r.P90PageMS),
			strconv.Itoa(r.Pages), strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Failed), f(r.ModelS), f(r.VsRandom), f(r.VsOracle),
			f(r.ModelVsRandom), f(r.OptimalPct), f(r.ProbesPerSite)})
	}
	cw.Flush()
	return cw.Error()
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
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}
