package evaluate

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%s\t%s\t%.1f\t%s\t%.1f %%\t\n",
			r.Strategy, r.Mode, r.Nodes, r.Pages, float64(r.Bytes)/1e6, r.DownloadS, r.MakespanS, r.MeanPageMS, r.P90PageMS,
			orDash(r.VsRandom, "%.2f"), orDash(r.VsOracle, "%.2f"), r.ModelS, orDash(r.ModelVsRandom, "%.2f"), r.OptimalPct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.AgreementN > 0 {
		_, err := fmt.Fprintf(w, "\nHEAD/GET (thesis 8.3): on %d sites the node with the smallest HEAD probe had the smallest download on %.1f %%; where not, its download took %.1f ms longer on average.\n",
			rep.AgreementN, rep.AgreementPct, rep.ExtraMS)
		return err
	}
	return nil
}

// WriteCrawlCSV writes the crawl results as CSV with a header row.
func WriteCrawlCSV(w io.Writer, rep CrawlReport) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"strategy", "mode", "nodes", "download_s", "makespan_s", "mean_page_ms", "p90_page_ms", "pages", "bytes",
		"failed", "model_s", "speedup_vs_random", "ratio_to_oracle", "model_speedup_vs_random", "optimal_pct", "probes_per_site"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	for _, r := range rep.Results {
		cw.Write([]string{r.Strategy, r.Mode, strconv.Itoa(r.Nodes), f(r.DownloadS), f(r.MakespanS), f(r.MeanPageMS), f(r.P90PageMS),
			strconv.Itoa(r.Pages), strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Failed), f(r.ModelS), f(r.VsRandom), f(r.VsOracle),
			f(r.ModelVsRandom), f(r.OptimalPct), f(r.ProbesPerSite)})
	}
	cw.Flush()
	return cw.Error()
}

// PlotCrawl writes a PNG bar chart of each strategy's total download time,
// measured and by the model.
func PlotCrawl(w io.Writer, rep CrawlReport) error {
	p := plot.New()
	p.Title.Text = "Front pages downloaded, one connection at a time per node"
	p.Y.Label.Text = "total download time (s, modelled)"
	var measured, model plotter.Values
	var names []string
	for _, r := range rep.Results {
		measured = append(measured, r.DownloadS)
		model = append(model, r.ModelS)
		names = append(names, r.Strategy)
	}
	width := vg.Points(18)
	a, err := plotter.NewBarChart(measured, width)
	if err != nil {
		return err
	}
	a.Color, a.Offset = color.RGBA{R: 31, G: 119, B: 180, A: 255}, -width/2
	b, err := plotter.NewBarChart(model, width)
	if err != nil {
		return err
	}
	b.Color, b.Offset = color.RGBA{R: 255, G: 127, B: 14, A: 255}, width/2
	p.Add(a, b)
	p.Legend.Add("measured over loopback", a)
	p.Legend.Add("the world's model", b)
	p.Legend.Top = true
	p.NominalX(names...)
	c := vgimg.New(6*vg.Inch, 4*vg.Inch)
	p.Draw(draw.New(c))
	_, err = vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}
