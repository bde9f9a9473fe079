package crawl

import (
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// procStatus returns a memory line of /proc/self/status (VmHWM, RssAnon,
// RssFile) in bytes.
func procStatus(t testing.TB, key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no " + key)
	return 0
}

// rssSampler records the peak of the anonymous and the file-backed parts of
// RSS every 20 ms; VmHWM only has their peak sum.
type rssSampler struct {
	anon, file atomic.Int64
	stop       chan struct{}
	done       sync.WaitGroup
}

func sampleRSS(t testing.TB) *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	s.done.Go(func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			s.anon.Store(max(s.anon.Load(), procStatus(t, "RssAnon")))
			s.file.Store(max(s.file.Load(), procStatus(t, "RssFile")))
			select {
			case <-s.stop:
				return
			case <-tk.C:
			}
		}
	})
	return s
}

func (s *rssSampler) close() { close(s.stop); s.done.Wait() }

// TestFrontierTenMillion enqueues ten million distinct URLs of 20,000 hosts
// the way link extraction does (pages of 100 links, a fifth of them links
// to URLs already seen) into a frontier on disk opened with BadgerOptions,
// then checks the counts and the seen test and that the process's peak RSS
// stayed within 256 MB. It takes minutes, so it runs only with MICRA_LONG=1;
// MICRA_LONG_URLS changes the number of URLs.
//
//	MICRA_LONG=1 go test -run TestFrontierTenMillion -v -timeout 60m ./crawl/
func TestFrontierTenMillion(t *testing.T) {
	if os.Getenv("MICRA_LONG") == "" {
		t.Skip("slow: set MICRA_LONG=1")
	}
	n := 10_000_000
	if v := os.Getenv("MICRA_LONG_URLS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("MICRA_LONG_URLS=%q", v)
		}
	}
	frontierLoad(t, BadgerOptions(t.TempDir()), n)
}

// frontierLoad is the body of TestFrontierTenMillion, with the badger
// options as a parameter so that they can be compared.
func frontierLoad(t *testing.T, opts badger.Options, n int) {
	const (
		hosts    = 20_000
		perPage  = 100
		repeats  = 20 // of each page's links point at URLs seen before
		rssLimit = 256 << 20
	)
	db, err := badger.Open(opts.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := openFrontier(db, uint(n), time.Hour, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	link := func(i int) string {
		return fmt.Sprintf("http://h%05d.example/section/%d/page-%d.html", i%hosts, i/hosts%97, i)
	}
	now := time.Unix(1_700_000_000, 0)
	rss := sampleRSS(t)
	start := time.Now()
	es := make([]entry, 0, perPage)
	us := make([]*url.URL, 0, perPage)
	var seen uint64 = 0x9e3779b97f4a7c15
	added := 0
	for page := 0; added < n; page++ {
		es, us = es[:0], us[:0]
		parent := link(page % max(added, 1))
		for j := 0; j < perPage && added < n; j++ {
			i := added
			if j < repeats && added > perPage {
				seen = seen*6364136223846793005 + 1442695040888963407
				i = int(seen>>33) % added
			} else {
				added++
			}
			s := link(i)
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, entry{URL: s, Parent: parent, Depth: 3, Hops: 2})
			us = append(us, u)
		}
		if _, err := f.addBatch(es, us, false, now); err != nil {
			t.Fatal(err)
		}
		if page%20000 == 0 && testing.Verbose() {
			t.Logf("%d URLs in %v, peak anonymous RSS %d MiB", added, time.Since(start).Round(time.Second), rss.anon.Load()>>20)
		}
	}
	elapsed := time.Since(start)
	queued, hs := f.counts()
	if queued != int64(n) || hs != hosts {
		t.Errorf("counts: %d queued, %d hosts; want %d, %d", queued, hs, n, hosts)
	}
	// The seen test: every sampled URL is known, none is queued twice.
	for k := range 1000 {
		i := k * (n / 1000)
		u, _ := url.Parse(link(i))
		r, err := f.add(entry{URL: link(i), Parent: "http://x.example/", Depth: 1}, u, false, now)
		if err != nil || r != addSeen {
			t.Fatalf("URL %d: %v %v", i, r, err)
		}
	}
	if q, _ := f.counts(); q != int64(n) {
		t.Fatalf("%d queued after re-adding, want %d", q, n)
	}
	// Checking out work still works at this size.
	l, _, err := f.next(now)
	if err != nil || l == nil {
		t.Fatalf("next: %v %v", l, err)
	}
	rss.close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%d URLs (%d hosts) enqueued in %v (%.0f URLs/s); peak RSS: anonymous %d MiB, mapped files %d MiB, VmHWM %d MiB; Go heap in use %d MiB; badger LSM %d MiB",
		n, hosts, elapsed.Round(time.Second), float64(n)/elapsed.Seconds(), rss.anon.Load()>>20, rss.file.Load()>>20,
		procStatus(t, "VmHWM")>>20, ms.HeapInuse>>20, lsmSize(db)>>20)
	// badger writes and reads its tables through mmap, so the pages of
	// recently written tables count as resident file mappings until the
	// kernel needs the memory back; what the process itself needs is the
	// anonymous part, and that is what the budget binds.
	if a := rss.anon.Load(); a > rssLimit {
		t.Errorf("peak anonymous RSS %d MiB over the %d MiB budget", a>>20, rssLimit>>20)
	}
}

func lsmSize(db *badger.DB) int64 { l, _ := db.Size(); return l }
