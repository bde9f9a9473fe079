package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestBenchFootprint runs "micra bench footprint" briefly on a built
// binary (the bench runs the node as this binary again, which a test
// binary cannot be) and checks that its JSON parses and its figures are
// sane.
func TestBenchFootprint(t *testing.T) {
	switch {
	case testing.Short() || raceEnabled:
		t.Skip("process-level: builds micra and runs a node process; skipped under -short and -race")
	case runtime.GOOS != "linux":
		t.Skip("bench footprint reads /proc: Linux only")
	}
	needData(t)
	bin := filepath.Join(t.TempDir(), "micra")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "footprint", "--idle", "5s", "--crawl", "5s", "--settle", "1s",
		"--warmup", "15s", "--sites", "100", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench footprint: %v\n%s", err, stderr.String())
	}
	var rep footprintReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not the report: %v\n%s", err, stdout.String())
	}
	if len(rep.Phases) != 2 || rep.Phases[0].Name != "idle" || rep.Phases[1].Name != "crawl" {
		t.Fatalf("phases: %+v", rep.Phases)
	}
	const mb = 1e6
	for _, p := range rep.Phases {
		switch {
		case p.Samples < 4 || p.Seconds < 4:
			t.Errorf("%s: %d samples over %.1f s", p.Name, p.Samples, p.Seconds)
		case p.CPUMean < 0 || p.CPUMean > 200 || p.CPUP95 < 0 || p.CPUMax < p.CPUP95:
			t.Errorf("%s: CPU mean %.2f %%, p95 %.2f %%, max %.2f %%", p.Name, p.CPUMean, p.CPUP95, p.CPUMax)
		case p.RSSMax < 10*mb || p.RSSMax > 1000*mb || p.RSSMean > p.RSSMax || p.HWM < p.RSSMax:
			t.Errorf("%s: RSS mean %d, max %d, peak %d", p.Name, p.RSSMean, p.RSSMax, p.HWM)
		case p.AnonMax <= 0 || p.FileMax <= 0 || p.Threads <= 0:
			t.Errorf("%s: anon %d, file %d, threads %d", p.Name, p.AnonMax, p.FileMax, p.Threads)
		case p.Go.HeapInuse <= 0 || p.Go.Sys < p.Go.HeapInuse || p.Go.Goroutines <= 0 || p.HeapMax < p.Go.HeapInuse:
			t.Errorf("%s: Go figures %+v, heap max %d", p.Name, p.Go, p.HeapMax)
		}
	}
	if c := rep.Phases[1]; c.Fetched <= 0 || c.Bytes <= 0 || c.Rate <= 0 || c.CPUMean <= 0 {
		t.Errorf("the crawl phase fetched %d pages, %d bytes at %.0f bytes/s, CPU %.2f %%", c.Fetched, c.Bytes, c.Rate, c.CPUMean)
	}
	if rep.Others != 0 {
		t.Errorf("the other peers fetched %d pages: subnets went to them, not the measured node", rep.Others)
	}
	if rep.Seeds <= 0 || rep.Bandwidth != 1<<20 || len(rep.NodeArgs) == 0 || rep.NodeArgs[0] != "node" {
		t.Errorf("report: seeds %d, bandwidth %d, node args %q", rep.Seeds, rep.Bandwidth, rep.NodeArgs)
	}
	var table bytes.Buffer
	writeFootprint(&table, rep)
	for _, want := range []string{"idle", "crawl", "CPU mean", "goals:"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}

// TestProcReaders reads this process's own /proc figures.
func TestProcReaders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Linux only")
	}
	ticks, err := readProcStat(os.Getpid())
	if err != nil || ticks < 0 {
		t.Fatalf("readProcStat: %d, %v", ticks, err)
	}
	m, err := readProcStatus(os.Getpid())
	if err != nil || m.rss <= 0 || m.hwm < m.rss || m.threads <= 0 {
		t.Fatalf("readProcStatus: %+v, %v", m, err)
	}
	if l := loadAvg(); l[0] < 0 {
		t.Errorf("load %v", l)
	}
}

func TestFootprintHelpers(t *testing.T) {
	got := parseMetrics(strings.NewReader("# HELP go_goroutines x\n# TYPE go_goroutines gauge\ngo_goroutines 42\n" +
		"go_memstats_heap_inuse_bytes 1.2345e+07\ngo_info{version=\"go1.25\"} 1\nbroken\nempty \n"))
	if got["go_goroutines"] != 42 || got["go_memstats_heap_inuse_bytes"] != 12345000 || len(got) != 2 {
		t.Errorf("parseMetrics: %v", got)
	}
	if p := percentile([]float64{5, 1, 4, 2, 3}, 0.95); p != 5 {
		t.Errorf("p95 %v", p)
	}
	if p := percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 0.95); p != 19 {
		t.Errorf("p95 of 1..20: %v", p)
	}
	if c := cpuPercent(150, 3*time.Second); c != 50 {
		t.Errorf("150 ticks in 3 s: %v %%", c)
	}
}
