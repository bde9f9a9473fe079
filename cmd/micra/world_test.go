package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/realdata"
	"github.com/micra-net/micra/internal/world"
)

func TestWorldGenRTTServe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "w")
	code, out, errs := runCmd(t, "world", "gen", "--seed", "3", "--sites", "30", "--nodes", "4", "--port", "0", "--out", dir)
	if code != 0 {
		t.Fatalf("gen: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, world.SpecFile)); err != nil {
		t.Fatalf("gen wrote no spec: %v\n%s", err, out)
	}
	// The same flags give the same world, byte for byte.
	dir2 := filepath.Join(t.TempDir(), "w")
	runCmd(t, "world", "gen", "--seed", "3", "--sites", "30", "--nodes", "4", "--port", "0", "--out", dir2)
	a, _ := os.ReadFile(filepath.Join(dir, world.SpecFile))
	b, _ := os.ReadFile(filepath.Join(dir2, world.SpecFile))
	if string(a) != string(b) {
		t.Error("two generations with the same seed differ")
	}
	// The registry files load with the subnet importer.
	files, _ := filepath.Glob(filepath.Join(dir, "registry", "*"))
	if len(files) == 0 {
		t.Fatal("no registry files")
	}
	if code, out, errs := runCmd(t, append([]string{"subnet", "import", "--strict"}, files...)...); code != 0 || !strings.Contains(out, "snapshot id") {
		t.Errorf("importing the world's registry: exit %d %s\n%s", code, errs, out)
	}
	code, out, errs = runCmd(t, "world", "rtt", dir)
	if code != 0 || !strings.Contains(out, "optimal") {
		t.Errorf("rtt: exit %d %s\n%s", code, errs, out)
	}

	// serve runs until its context ends and answers meanwhile.
	w, err := world.Load(context.Background(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	out2 := &syncBuffer{}
	wg.Go(func() {
		if c := run(ctx, []string{"world", "serve", "--scale", "0", "--port", "0", dir}, out2, out2); c != 0 {
			t.Errorf("serve exit %d: %s", c, out2.String())
		}
	})
	served := false
	re := regexp.MustCompile(`e\.g\. (http://\S+)`)
	for deadline := time.Now().Add(30 * time.Second); !served && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		m := re.FindStringSubmatch(out2.String())
		if m == nil {
			continue
		}
		// The URL names the site; ask its address, as the world's DNS would.
		u, err := url.Parse(m[1])
		if err != nil {
			t.Fatal(err)
		}
		site, ok := w.Site(u.Hostname())
		if !ok {
			t.Fatalf("serve printed an unknown site %s", u.Hostname())
		}
		req, _ := http.NewRequest(http.MethodHead, "http://"+site.Addrs[0].String()+":"+u.Port()+"/", nil)
		req.Host = u.Host
		c := http.Client{Timeout: 5 * time.Second}
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			served = resp.StatusCode == http.StatusOK
		}
	}
	cancel()
	wg.Wait()
	if !served {
		t.Errorf("serve never answered:\n%s", out2.String())
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBenchDelegation(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "delegation", "--sites", "200", "--from-real=false", "--nodes", "6", "--threshold", "50",
		"--repeats", "1", "--progressive", "100", "--json", "--csv", filepath.Join(dir, "r.csv"), "--plot", filepath.Join(dir, "r.png"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Results []struct {
			Strategy    string  `json:"strategy"`
			Nodes       int     `json:"nodes"`
			ThresholdMS float64 `json:"threshold_ms"`
			OptimalPct  float64 `json:"optimal_pct"`
			Probes      float64 `json:"probes_per_url"`
			Excess      float64 `json:"excess_ms"`
			Delegated   int     `json:"delegated"`
		} `json:"results"`
		Progressive []json.RawMessage `json:"progressive"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(v.Results) != 6 || len(v.Progressive) != 1 {
		t.Fatalf("%d results, %d curves", len(v.Results), len(v.Progressive))
	}
	for _, r := range v.Results {
		if r.Nodes != 6 || r.Delegated == 0 || r.OptimalPct <= 0 {
			t.Errorf("result %+v", r)
		}
	}
	for _, f := range []string{"r.csv", "r.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if code, _, _ := runCmd(t, "bench", "delegation", "--strategies", "nope"); code != 2 {
		t.Errorf("unknown strategy: exit %d", code)
	}
	if code, _, _ := runCmd(t, "bench", "delegation", "--probes", "exact"); code != 2 {
		t.Errorf("unknown probes: exit %d", code)
	}
	for _, bad := range [][]string{{"--tolerance", "nope"}, {"--tolerance", "0"}, {"--map=elsewhere"}, {"--rtt-noise", "-1"}, {"--rtt-jitter", "1e9"}} {
		if code, _, _ := runCmd(t, append([]string{"bench", "delegation"}, bad...)...); code != 2 {
			t.Errorf("%q: exit %d", bad, code)
		}
	}
	// What a running network can measure: the map of inter-node RTTs, the
	// density tolerance, noisy RTTs.
	code, out, errs = runCmd(t, "bench", "delegation", "--sites", "200", "--from-real=false", "--nodes", "6", "--threshold", "50",
		"--repeats", "1", "--progressive", "0", "--strategies", "ipmicra+", "--map=measured", "--tolerance", "density",
		"--rtt-noise", "0.05", "--rtt-jitter", "1", "--json")
	if code != 0 {
		t.Fatalf("measured: exit %d: %s", code, errs)
	}
	v.Results = nil
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Results) != 1 || v.Results[0].OptimalPct < 50 {
		t.Errorf("measured: %v %+v", err, v.Results)
	}
	// Probes with the world's jitter: a noisy measurement can only cost
	// brute force optimal delegations.
	code, out, errs = runCmd(t, "bench", "delegation", "--sites", "200", "--from-real=false", "--nodes", "6", "--threshold", "50",
		"--repeats", "1", "--progressive", "0", "--strategies", "brute", "--probes", "jitter", "--json")
	if code != 0 {
		t.Fatalf("jitter: exit %d: %s", code, errs)
	}
	v.Results = nil
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Results) != 1 || v.Results[0].OptimalPct > 100 || v.Results[0].OptimalPct < 50 {
		t.Errorf("jitter: %v %+v", err, v.Results)
	}
}

func TestBenchDelegationGeo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "servers.csv")
	var b strings.Builder
	b.WriteString("ipv4,latitude,longitude,country_code\n")
	for i, r := range [][3]string{{"8.8.8.8", "37.42", "-122.08"}, {"81.2.69.142", "51.51", "-0.13"}, {"193.0.6.139", "52.37", "4.9"},
		{"200.160.2.3", "-23.55", "-46.63"}, {"203.119.101.61", "35.68", "139.69"}, {"84.200.69.80", "50.11", "8.68"},
		{"1.1.1.1", "-33.87", "151.21"}, {"77.88.8.8", "55.75", "37.62"}, {"196.216.2.6", "-20.16", "57.5"}, {"64.6.64.6", "38.95", "-77.45"}} {
		fmt.Fprintf(&b, "%s,%s,%s,%s\n", r[0], r[1], r[2], []string{"US", "GB", "NL", "BR", "JP", "DE", "AU", "RU", "MU", "US"}[i])
	}
	b.WriteString("broken,1,2,US\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "bench", "delegation", "--geo", path, "--nodes", "6", "--threshold", "50", "--repeats", "1",
		"--progressive", "0", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Geo struct {
			Rows, Skipped, Sampled int
			Examples               []string
		} `json:"geo"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.Geo.Rows != 10 || v.Geo.Skipped != 1 || v.Geo.Sampled != 10 || len(v.Geo.Examples) != 1 || !strings.Contains(v.Geo.Examples[0], "servers.csv:12:") {
		t.Errorf("geo %+v", v.Geo)
	}
	if len(v.Results) != 6 {
		t.Fatalf("%d results", len(v.Results))
	}
	for _, r := range v.Results {
		if _, ok := r["excess_per_url_ms"].(float64); !ok {
			t.Errorf("result without excess_per_url_ms: %v", r)
		}
	}
	// A cold start delegates every site by the strategy, the training
	// split only about a third.
	delegated := func(train string) float64 {
		t.Helper()
		code, out, errs := runCmd(t, "bench", "delegation", "--geo", path, "--nodes", "6", "--repeats", "1", "--progressive", "0",
			"--strategies", "oracle", "--train", train, "--json")
		var v struct{ Results []map[string]any }
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v.Results) != 1 {
			t.Fatalf("--train %s: exit %d: %s", train, code, errs)
		}
		n, _ := v.Results[0]["delegated"].(float64)
		return n
	}
	if cold, trained := delegated("0"), delegated("0.65"); cold != 10 || trained >= cold || trained < 1 {
		t.Errorf("delegated %v sites cold, %v after training, want 10 and fewer", cold, trained)
	}
	if code, _, _ := runCmd(t, "bench", "delegation", "--geo", path, "--train", "1"); code != 2 {
		t.Errorf("--train 1: exit %d", code)
	}
	if code, _, _ := runCmd(t, "bench", "delegation", "--geo", path, "--strict", "--nodes", "6", "--repeats", "1", "--progressive", "0"); code == 0 {
		t.Error("--strict accepted a malformed row")
	}
	if code, _, _ := runCmd(t, "bench", "delegation", "--geo", path, "--world", dir); code != 2 {
		t.Errorf("--geo with --world: exit %d", code)
	}
}

func TestBenchStructure(t *testing.T) {
	if raceEnabled {
		t.Skip("reads the real DB-IP file: real-data tests run without -race")
	}
	realdata.Need(t, world.DBIPFile)
	code, out, errs := runCmd(t, "bench", "structure", "--rows", "3000", "--sites", "300", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Real, Generated struct {
			Sites        int     `json:"sites"`
			SiblingPairs int     `json:"sibling_pairs"`
			SamePlace    float64 `json:"sibling_same_place"`
		}
		Attribution string `json:"attribution"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.Real.Sites != 3000 || v.Generated.Sites == 0 || v.Real.SamePlace < 0 || v.Real.SamePlace > 1 || !strings.Contains(v.Attribution, "DB-IP") {
		t.Errorf("structure %+v", v)
	}
	if code, _, _ := runCmd(t, "bench", "structure", "--rows", "0"); code != 2 {
		t.Errorf("--rows 0: exit %d", code)
	}
}

func TestBenchCrawl(t *testing.T) {
	if raceEnabled {
		t.Skip("a measurement over emulated crawls: the plain run has it (the crawler's races are crawl's tests')")
	}
	dir := t.TempDir()
	code, out, errs := runCmd(t, "bench", "crawl", "--sites", "80", "--nodes", "6", "--crawl-sites", "30", "--max-pages", "20", "--agreement", "5", "--scale", "0.02",
		"--json", "--csv", filepath.Join(dir, "c.csv"), "--plot", filepath.Join(dir, "c.png"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Agreement *float64         `json:"head_get_agreement_pct"`
		Results   []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.Agreement == nil || *v.Agreement < 0 || *v.Agreement > 100 || len(v.Results) != 8 {
		t.Fatalf("agreement %v, %d results", v.Agreement, len(v.Results))
	}
	for i, r := range v.Results {
		for _, k := range []string{"strategy", "mode", "nodes", "download_s", "makespan_s", "mean_page_ms", "p90_page_ms", "pages", "bytes"} {
			if _, ok := r[k]; !ok {
				t.Errorf("result %d lacks %s: %v", i, k, r)
			}
		}
		mode := evaluate.CrawlModes[i/len(evaluate.CrawlStrategies)]
		if r["mode"] != mode || r["strategy"] != evaluate.CrawlStrategies[i%len(evaluate.CrawlStrategies)] {
			t.Errorf("result %d: %v", i, r)
		}
		// Every strategy crawled the same pages in a mode: the 30 front
		// pages, or the first result's pages to depth 1.
		if want := map[string]any{evaluate.ModeSequential: 30.0, evaluate.ModeCrawl: v.Results[len(evaluate.CrawlStrategies)]["pages"]}[mode]; r["pages"] != want {
			t.Errorf("result %d: %v pages, want %v", i, r["pages"], want)
		}
		if p, _ := r["pages"].(float64); mode == evaluate.ModeCrawl && p <= 30 {
			t.Errorf("the crawl mode crawled %v pages of 30 sites to depth 1", p)
		}
		if want := map[bool]string{true: "overlay", false: "model"}[r["strategy"] == evaluate.Guided]; r["decided_by"] != want {
			t.Errorf("%v decided by %v, want %s", r["strategy"], r["decided_by"], want)
		}
	}
	for _, f := range []string{"c.csv", "c.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, bad := range [][]string{{"--mode", "parallel"}, {"--depth", "0"}, {"--max-pages", "5"}, {"--strategies", "brute"}, {"--scale", "0"}, {"--nodes", "0"}, {"--decide", "oracle"}} {
		if code, _, _ := runCmd(t, append([]string{"bench", "crawl", "--sites", "20"}, bad...)...); code == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
}
