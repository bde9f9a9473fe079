package footprint

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

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
