// Package benchutil holds what the crawler comparison's processes share:
// the result they report, peak RSS and profiling.
package benchutil

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Result is what a crawler process reports, as one JSON line on stdout.
type Result struct {
	Crawler     string  `json:"crawler"`
	Pages       int64   `json:"pages"`   // distinct pages fetched, robots.txt excluded
	Repeats     int64   `json:"repeats"` // further fetches of pages already fetched
	Seconds     float64 `json:"seconds"` // first request to idle
	PeakRSS     int64   `json:"peak_rss"`
	RSSDetail   string  `json:"rss_detail"`   // /proc/self/status memory lines at the end
	BodyBytes   int64   `json:"body_bytes"`   // decoded HTTP body bytes of 2xx pages
	WireBytes   int64   `json:"wire_bytes"`   // HTTP body bytes as read from the network
	RecordBytes int64   `json:"record_bytes"` // compressed record batches (micra)
	RawRecBytes int64   `json:"raw_record_bytes"`
	Records     int64   `json:"records"`
	GoMaxProcs  int     `json:"gomaxprocs"`
	Concurrency int     `json:"concurrency"`
}

// PagesPerSec is Pages over Seconds.
func (r Result) PagesPerSec() float64 { return float64(r.Pages) / r.Seconds }

// Config is what both crawlers are given.
type Config struct {
	Start       string
	Concurrency int
	URLsFile    string
	WorkDir     string
	Profile     string
}

// Main parses the common flags, runs crawl and prints its result.
func Main(crawl func(Config) (Result, error)) error {
	var c Config
	flag.StringVar(&c.Start, "url", "", "start URL")
	flag.IntVar(&c.Concurrency, "c", 8, "concurrent requests")
	flag.StringVar(&c.URLsFile, "urls", "", "file to write the fetched URLs to")
	flag.StringVar(&c.WorkDir, "dir", "", "scratch directory")
	flag.StringVar(&c.Profile, "prof", "", "write cpu.pprof and allocs.pprof of the crawl into this directory")
	flag.Parse()
	r, err := crawl(c)
	if err != nil {
		return err
	}
	r.GoMaxProcs, r.Concurrency = runtime.GOMAXPROCS(0), c.Concurrency
	return json.NewEncoder(os.Stdout).Encode(r)
}

// PeakRSS returns the process's peak resident set size in bytes (VmHWM).
func PeakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		return ru.Maxrss << 10
	}
	return 0
}

// RSSDetail returns the memory lines of /proc/self/status: the peak, and the
// current split into anonymous memory and mapped files (the binary's code).
func RSSDetail() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	var parts []string
	for line := range strings.SplitSeq(string(b), "\n") {
		for _, k := range []string{"VmHWM:", "VmRSS:", "RssAnon:", "RssFile:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				parts = append(parts, k+strings.Join(strings.Fields(v), ""))
			}
		}
	}
	return strings.Join(parts, " ")
}

// StartProfile starts a CPU profile into dir and returns a function that
// stops it and writes an allocation profile; with dir "" it does nothing.
func StartProfile(dir string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if h, err := os.Create(filepath.Join(dir, "allocs.pprof")); err == nil {
			pprof.Lookup("allocs").WriteTo(h, 0)
			h.Close()
		}
	}, nil
}

// WriteURLs writes urls, sorted, one a line.
func WriteURLs(path string, urls []string) error {
	sort.Strings(urls)
	return os.WriteFile(path, []byte(strings.Join(urls, "\n")+"\n"), 0o644)
}
