package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/footprint"
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
	var rep footprint.Report
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
	rep.Write(&table)
	for _, want := range []string{"idle", "crawl", "CPU mean", "goals:"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	t.Logf("\n%s", table.String())
}
