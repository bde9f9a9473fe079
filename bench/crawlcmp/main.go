// Command crawlcmp compares micra's crawler with colly v2 on one site: each
// crawler is its own program (./micra, ./colly), so that its process holds
// only its own code and its peak RSS is its own; they run at the same
// concurrency, on the same start page, one after the other, several rounds
// with alternating order.
//
//	crawlcmp -bin DIR -url http://127.0.0.80:18080/index.html -c 8 -runs 3 -out DIR
//
// run.sh beside this file builds the three programs, sets up nginx and calls
// it. Each crawler prints one benchutil.Result as JSON.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/micra-net/micra/bench/internal/benchutil"
)

type result = benchutil.Result

func main() {
	log.SetFlags(0)
	if err := runCompare(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

func readURLs(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for l := range strings.SplitSeq(string(b), "\n") {
		if l != "" {
			m[l] = true
		}
	}
	return m, nil
}

func runCompare(args []string) error {
	fs := flag.NewFlagSet("crawlcmp", flag.ExitOnError)
	bin := fs.String("bin", ".", "directory holding the micra and colly programs")
	start := fs.String("url", "", "start URL")
	conc := fs.Int("c", 8, "concurrent requests, for both crawlers")
	runs := fs.Int("runs", 3, "rounds; the order of the crawlers alternates")
	out := fs.String("out", "", "results directory")
	nginxLog := fs.String("nginxlog", "", "nginx access log (user agent, status, URI, bytes) to cross-check")
	fs.Parse(args)
	if *start == "" || *out == "" {
		return fmt.Errorf("-url and -out are required")
	}
	var all []result
	var firstSets [2]map[string]bool
	var serverSets [2]map[string]bool
	for round := range *runs {
		order := []string{"micra", "colly"}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			dir := filepath.Join(*out, fmt.Sprintf("%s-%d", name, round))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			var logStart int64
			if *nginxLog != "" {
				if st, err := os.Stat(*nginxLog); err == nil {
					logStart = st.Size()
				}
			}
			urls := filepath.Join(dir, "urls.txt")
			cmd := exec.Command(filepath.Join(*bin, name), "-url", *start, "-c", strconv.Itoa(*conc), "-urls", urls, "-dir", dir)
			cmd.Stderr = os.Stderr
			t0 := time.Now()
			b, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			var r result
			if err := json.Unmarshal(b, &r); err != nil {
				return fmt.Errorf("%s: %w: %q", name, err, b)
			}
			fmt.Fprintf(os.Stderr, "round %d %-5s %5d pages (+%d repeated) %6.2f s %7.1f pages/s peak RSS %6.1f MiB (process %.2f s; %s)\n",
				round, name, r.Pages, r.Repeats, r.Seconds, r.PagesPerSec(), float64(r.PeakRSS)/(1<<20), time.Since(t0).Seconds(), r.RSSDetail)
			all = append(all, r)
			i := 0
			if name == "colly" {
				i = 1
			}
			if round == 0 {
				if firstSets[i], err = readURLs(urls); err != nil {
					return err
				}
				if *nginxLog != "" {
					time.Sleep(200 * time.Millisecond)
					if serverSets[i], err = serverURIs(*nginxLog, logStart); err != nil {
						return err
					}
					if err := writeSet(filepath.Join(dir, "server-uris.txt"), serverSets[i]); err != nil {
						return err
					}
				}
			}
		}
	}
	report(os.Stdout, all, *conc)
	fmt.Println()
	compareSets(os.Stdout, "URLs the crawlers report", firstSets[0], firstSets[1])
	if serverSets[0] != nil {
		compareSets(os.Stdout, "URIs nginx served (robots.txt excluded)", serverSets[0], serverSets[1])
	}
	return nil
}

func writeSet(path string, m map[string]bool) error {
	var l []string
	for k := range m {
		l = append(l, k)
	}
	return benchutil.WriteURLs(path, l)
}

// serverURIs reads the access log lines written since offset and returns the
// URIs requested (robots.txt excluded), counting duplicates as an error.
func serverURIs(path string, offset int64) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	m := map[string]bool{}
	dups := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "\t")
		if len(parts) < 3 || parts[2] == "/robots.txt" {
			continue
		}
		if m[parts[2]] {
			dups++
		}
		m[parts[2]] = true
	}
	if dups > 0 {
		fmt.Fprintf(os.Stderr, "  nginx saw %d repeated requests\n", dups)
	}
	return m, sc.Err()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func report(w io.Writer, all []result, conc int) {
	by := map[string][]result{}
	for _, r := range all {
		by[r.Crawler] = append(by[r.Crawler], r)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "crawler\truns\tpages\tpages/s median\tpages/s min..max\tpeak RSS MiB median\tRSS min..max\t\n")
	med := map[string][2]float64{}
	for _, name := range []string{"micra", "colly"} {
		rs := by[name]
		if len(rs) == 0 {
			continue
		}
		var pps, rss []float64
		for _, r := range rs {
			pps = append(pps, r.PagesPerSec())
			rss = append(rss, float64(r.PeakRSS)/(1<<20))
		}
		med[name] = [2]float64{median(pps), median(rss)}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f..%.1f\t%.1f\t%.1f..%.1f\t\n", name, len(rs), rs[0].Pages,
			median(pps), slices.Min(pps), slices.Max(pps), median(rss), slices.Min(rss), slices.Max(rss))
	}
	tw.Flush()
	// Ratios per round: the two crawlers of one round ran back to back.
	var sp, mem []float64
	for i := 0; i+1 < len(all); i += 2 {
		m, c := all[i], all[i+1]
		if m.Crawler != "micra" {
			m, c = c, m
		}
		sp = append(sp, m.PagesPerSec()/c.PagesPerSec())
		mem = append(mem, float64(m.PeakRSS)/float64(c.PeakRSS))
	}
	if len(sp) > 0 {
		fmt.Fprintf(w, "\nconcurrency %d, GOMAXPROCS %d\n", conc, all[0].GoMaxProcs)
		fmt.Fprintf(w, "micra/colly pages/s per round: %s (median %.2f)\n", fmtList(sp), median(sp))
		fmt.Fprintf(w, "micra/colly peak RSS per round: %s (median %.2f)\n", fmtList(mem), median(mem))
	}
	for _, r := range by["micra"] {
		if r.BodyBytes > 0 {
			fmt.Fprintf(w, "micra result ratio: %d record bytes (zstd) / %d body bytes = 1/%.1f (wire %d bytes: 1/%.1f; records before zstd %d bytes)\n",
				r.RecordBytes, r.BodyBytes, float64(r.BodyBytes)/float64(r.RecordBytes), r.WireBytes,
				float64(r.WireBytes)/float64(r.RecordBytes), r.RawRecBytes)
			break
		}
	}
}

func fmtList(xs []float64) string {
	var b bytes.Buffer
	for i, x := range xs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", x)
	}
	return b.String()
}

func compareSets(w io.Writer, what string, micra, colly map[string]bool) {
	var onlyM, onlyC []string
	for u := range micra {
		if !colly[u] {
			onlyM = append(onlyM, u)
		}
	}
	for u := range colly {
		if !micra[u] {
			onlyC = append(onlyC, u)
		}
	}
	sort.Strings(onlyM)
	sort.Strings(onlyC)
	fmt.Fprintf(w, "%s: micra %d, colly %d, both %d, only micra %d, only colly %d\n",
		what, len(micra), len(colly), len(micra)-len(onlyM), len(onlyM), len(onlyC))
	show := func(tag string, l []string) {
		for i, u := range l {
			if i == 10 {
				fmt.Fprintf(w, "  %s ... and %d more\n", tag, len(l)-10)
				break
			}
			fmt.Fprintf(w, "  %s %s\n", tag, u)
		}
	}
	show("only micra:", onlyM)
	show("only colly:", onlyC)
}
