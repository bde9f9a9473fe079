package evaluate

import (
	"time"

	"github.com/micra-net/micra/internal/world"
)

// PageSizeFactors are the factors by which the page-size model scales the
// front pages the sequential mode downloaded.
var PageSizeFactors = []float64{0.1, 1, 10, 100}

// SizeModel is the sequential mode's crawl by the world's model with
// every front page Factor times as large: each strategy's total download
// time and its speed-up over random. Small pages cost two round trips
// each wherever they come from, so the speed-up is the ratio of the mean
// RTTs; large pages cost their bytes over the path's bandwidth, which in
// the world falls with the RTT only through the TCP window limit.
type SizeModel struct {
	Factor     float64            `json:"factor"`
	MeanPageKB float64            `json:"mean_page_kb"`
	DownloadS  map[string]float64 `json:"download_s"`        // by strategy
	VsRandom   map[string]float64 `json:"speedup_vs_random"` // by strategy; empty without random
}

// pageSizeModel returns the model at every PageSizeFactors for the
// sequential results of rs, on the front pages that every strategy
// downloaded; nil when the sequential mode was not run.
func pageSizeModel(w *world.World, sites []world.Site, rs []CrawlResult) []SizeModel {
	var seq []CrawlResult
	for _, r := range rs {
		if r.Mode == ModeSequential {
			seq = append(seq, r)
		}
	}
	if len(seq) == 0 {
		return nil
	}
	// The pages every strategy got, at the size the first one got them.
	bytes := map[int]int64{}
	for id, b := range seq[0].bytesBySite {
		all := true
		for _, r := range seq[1:] {
			_, ok := r.bytesBySite[id]
			all = all && ok
		}
		if all {
			bytes[id] = b
		}
	}
	if len(bytes) == 0 {
		return nil
	}
	var total int64
	for _, b := range bytes {
		total += b
	}
	var out []SizeModel
	for _, f := range PageSizeFactors {
		m := SizeModel{Factor: f, MeanPageKB: f * float64(total) / float64(len(bytes)) / 1000, DownloadS: map[string]float64{}}
		for _, r := range seq {
			var d time.Duration
			for _, s := range sites {
				if b, ok := bytes[s.ID]; ok {
					d += ModelDownload(w, r.assign[s.ID], s, 1, int64(f*float64(b)))
				}
			}
			m.DownloadS[r.Strategy] = d.Seconds()
		}
		if rnd, ok := m.DownloadS[Random]; ok {
			m.VsRandom = map[string]float64{}
			for k, v := range m.DownloadS {
				m.VsRandom[k] = rnd / v
			}
		}
		out = append(out, m)
	}
	return out
}
