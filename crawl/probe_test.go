package crawl

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	// slow is the delay of a sample a burst of load held up.
	const delay, slow = 40 * time.Millisecond, 400 * time.Millisecond
	var heads, others, slowLeft atomic.Int64
	var mu sync.Mutex
	conns := map[string]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			heads.Add(1)
		} else {
			others.Add(1)
		}
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		if slowLeft.Add(-1) >= 0 {
			time.Sleep(slow)
			return
		}
		time.Sleep(delay)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns[c.RemoteAddr().String()] = true
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	f := newTestFetcher(t, AllowPrivateNetworks(serverPort(t, srv)))

	t.Run("least of fresh connections", func(t *testing.T) {
		rtt, err := f.Probe(t.Context(), srv.URL+"/", 3)
		if err != nil {
			t.Fatal(err)
		}
		// The server holds each answer delay long: the request's round
		// trip is at least that, and the probe at least half of it.
		if rtt < delay/2 {
			t.Errorf("probe %v, want at least %v", rtt, delay/2)
		}
		if heads.Load() != 3 || others.Load() != 0 {
			t.Errorf("%d HEADs and %d other requests, want 3 HEADs", heads.Load(), others.Load())
		}
		mu.Lock()
		n := len(conns)
		mu.Unlock()
		if n != 3 {
			t.Errorf("%d connections for 3 attempts, want one each", n)
		}
	})
	t.Run("two held-up samples of three", func(t *testing.T) {
		// The median would be a held-up sample, at least slow/2; the least
		// is not (a ratio of ten, not a timing: the fast sample would have
		// to be held up by ten times its own delay).
		slowLeft.Store(2)
		rtt, err := f.Probe(t.Context(), srv.URL+"/", 3)
		if err != nil {
			t.Fatal(err)
		}
		if rtt < delay/2 || rtt >= slow/2 {
			t.Errorf("probe %v, want the fast sample: at least %v, under %v", rtt, delay/2, slow/2)
		}
	})
	t.Run("any status is an answer", func(t *testing.T) {
		if _, err := f.Probe(t.Context(), srv.URL+"/missing", 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the address probed", func(t *testing.T) {
		_, a, err := f.ProbeAddr(t.Context(), srv.URL+"/missing", 1)
		if want := srv.Listener.Addr().(*net.TCPAddr).AddrPort().Addr(); err != nil || a != want {
			t.Errorf("ProbeAddr = %v, %v; want %v", a, err, want)
		}
	})
	t.Run("attempts are bounded", func(t *testing.T) {
		before := heads.Load()
		if _, err := f.Probe(t.Context(), srv.URL+"/missing", 100); err != nil {
			t.Fatal(err)
		}
		if got := heads.Load() - before; got != MaxProbeAttempts {
			t.Errorf("%d attempts, want %d", got, MaxProbeAttempts)
		}
	})
	t.Run("bad URLs", func(t *testing.T) {
		for _, u := range []string{"ftp://example.org/", "::"} {
			if _, err := f.Probe(t.Context(), u, 1); err == nil {
				t.Errorf("probe of %q succeeded", u)
			}
		}
	})
	t.Run("egress guard", func(t *testing.T) {
		guarded := newTestFetcher(t)
		if _, err := guarded.Probe(t.Context(), srv.URL+"/", 1); !errors.Is(err, ErrProbe) || !errors.Is(err, ErrForbiddenDestination) {
			t.Errorf("probe of loopback without permission: %v", err)
		}
	})
}

func TestProbeFailures(t *testing.T) {
	// A listener that accepts and then resets the next connections: a probe
	// of three rides out one failure, not two (the median would be a
	// failure).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Int64 // how many of the next connections fail
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew && fail.Add(-1) >= 0 {
				c.Close()
			}
		},
	}
	go srv.Serve(ln)
	defer srv.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	f := newTestFetcher(t, AllowPrivateNetworks(port), Timeouts(time.Second, 2*time.Second, 5*time.Second))
	url := "http://" + ln.Addr().String() + "/"

	fail.Store(1)
	if _, err := f.Probe(t.Context(), url, 3); err != nil {
		t.Errorf("one failure of three: %v", err)
	}
	fail.Store(2)
	if _, err := f.Probe(t.Context(), url, 3); !errors.Is(err, ErrProbe) {
		t.Errorf("two failures of three: %v, want ErrProbe", err)
	}
	fail.Store(0)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.Probe(ctx, url, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled probe: %v", err)
	}
}

func TestTimingRTT(t *testing.T) {
	fresh := &Timing{DNS: 5 * time.Millisecond, TLS: 20 * time.Millisecond, TTFB: 125 * time.Millisecond}
	if got := fresh.RTT(); got != 50*time.Millisecond {
		t.Errorf("fresh connection: %v, want 50ms", got)
	}
	reused := &Timing{Reused: true, TTFB: 30 * time.Millisecond}
	if got := reused.RTT(); got != 30*time.Millisecond {
		t.Errorf("reused connection: %v, want 30ms", got)
	}
}

func TestCalibrator(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	addr := netip.MustParseAddr("192.0.2.1")
	type step struct {
		rtt  time.Duration
		slow bool
	}
	for _, tc := range []struct {
		name  string
		cfg   CalibrationConfig
		steps []step
	}{
		{"stable page never signals", CalibrationConfig{}, []step{{ms(50), false}, {ms(52), false}, {ms(49), false}, {ms(51), false}, {ms(50), false}}},
		{"two slow fetches in a row signal once", CalibrationConfig{}, []step{
			{ms(50), false}, {ms(50), false}, {ms(50), false}, {ms(150), false}, {ms(160), true},
			// The slow regime is the new history: no more signals.
			{ms(155), false}, {ms(150), false}, {ms(160), false},
		}},
		{"an interrupted run does not signal", CalibrationConfig{}, []step{
			{ms(50), false}, {ms(50), false}, {ms(150), false}, {ms(50), false}, {ms(150), false}, {ms(50), false},
		}},
		{"no signal before a history", CalibrationConfig{Consecutive: 1}, []step{{ms(10), false}, {ms(500), false}, {ms(10), false}, {ms(500), true}}},
		{"jitter on a near server is not a slowdown", CalibrationConfig{Consecutive: 1}, []step{{ms(1), false}, {ms(1), false}, {ms(5), false}, {ms(8), false}}},
		{"factor", CalibrationConfig{Factor: 4, Consecutive: 1}, []step{{ms(50), false}, {ms(50), false}, {ms(150), false}, {ms(250), true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCalibrator(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				s, slow := c.Observe("http://a.example/p", addr, st.rtt)
				if slow != st.slow {
					t.Fatalf("fetch %d (%v): slow = %v, want %v", i, st.rtt, slow, st.slow)
				}
				if slow && (s.Addr != addr || s.RTT != st.rtt || s.Baseline <= 0 || s.Page != "http://a.example/p") {
					t.Fatalf("fetch %d: signal %+v", i, s)
				}
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		c, err := NewCalibrator(CalibrationConfig{MaxPages: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"a", "b", "c", "d", "e"} {
			c.Observe(p, addr, time.Millisecond)
		}
		if c.Len() != 3 {
			t.Errorf("%d pages kept, want 3", c.Len())
		}
		c.Forget("e")
		if c.Len() != 2 {
			t.Errorf("%d pages after Forget, want 2", c.Len())
		}
	})
	t.Run("far servers", func(t *testing.T) {
		// This node won 192.0.2.0/24 with a 20 ms probe; nothing of
		// 198.51.100.0/24 is its.
		ref := func(a netip.Addr) (time.Duration, bool) {
			if netip.MustParsePrefix("192.0.2.0/24").Contains(a) {
				return ms(20), true
			}
			return 0, false
		}
		c, err := NewCalibrator(CalibrationConfig{Reference: ref, MaxServers: 4})
		if err != nil {
			t.Fatal(err)
		}
		type fetch struct {
			addr string
			rtt  time.Duration
			far  bool
		}
		for i, f := range []fetch{
			{"192.0.2.7", ms(25), false}, {"192.0.2.7", ms(24), false}, // near: judged, not far
			{"192.0.2.8", ms(90), false}, {"192.0.2.8", ms(80), true}, // far: the least of two fetches, signalled once
			{"192.0.2.8", ms(85), false}, {"192.0.2.8", ms(95), false},
			{"192.0.2.9", ms(90), false}, {"192.0.2.9", ms(25), false}, // one near fetch clears it
			{"192.0.2.10", ms(29), false}, {"192.0.2.10", ms(29), false}, // within 1.5 times and 10 ms of the reference
			{"198.51.100.1", ms(300), false}, {"198.51.100.1", ms(300), false}, // no reference
		} {
			a := netip.MustParseAddr(f.addr)
			s, sig := c.Observe("http://"+f.addr+"/"+strconv.Itoa(i), a, f.rtt)
			if sig != f.far || (sig && (!s.Far || s.Addr != a || s.RTT != ms(80) || s.Baseline != ms(20) || s.Count != 2)) {
				t.Fatalf("fetch %d of %s (%v): signal %v %+v, want far = %v", i, f.addr, f.rtt, sig, s, f.far)
			}
		}
		if c.servers.len() != 4 {
			t.Errorf("%d servers remembered, want the bound 4", c.servers.len())
		}
		// Far is the same test, for a probe confirming a signal.
		for _, f := range []struct {
			rtt, ref time.Duration
			far      bool
		}{
			{ms(80), ms(20), true}, {ms(40), ms(25), true},
			{ms(30), ms(20), false}, // not more than 1.5 times
			{ms(12), ms(5), false},  // less than 10 ms above
			{ms(80), 0, false},      // no reference
		} {
			if got := c.Far(f.rtt, f.ref); got != f.far {
				t.Errorf("Far(%v, %v) = %v, want %v", f.rtt, f.ref, got, f.far)
			}
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for _, cfg := range []CalibrationConfig{{Factor: 0.5}, {History: 1}, {Consecutive: -1}, {MinIncrease: -1}, {FarFactor: 0.5}, {FarFetches: -1}} {
			if _, err := NewCalibrator(cfg); err == nil {
				t.Errorf("%+v accepted", cfg)
			}
		}
	})
}

func TestScheduleExported(t *testing.T) {
	loc := time.UTC
	s, err := NewSchedule(loc, Window{Day: time.Monday, Start: 2 * time.Hour, End: 4 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mon := time.Date(2024, 1, 1, 0, 0, 0, 0, loc) // a Monday
	if s.Open(mon.Add(time.Hour)) || !s.Open(mon.Add(3*time.Hour)) {
		t.Error("Open disagrees with the window")
	}
	if got := s.NextOpen(mon.Add(time.Hour)); !got.Equal(mon.Add(2 * time.Hour)) {
		t.Errorf("NextOpen before the window: %v", got)
	}
	if got := s.NextOpen(mon.Add(5 * time.Hour)); !got.Equal(mon.Add(7*24*time.Hour + 2*time.Hour)) {
		t.Errorf("NextOpen after the window: %v", got)
	}
	var always Schedule
	if now := time.Now(); !always.Open(now) || !always.NextOpen(now).Equal(now) {
		t.Error("the zero Schedule is not always open")
	}
	if _, err := NewSchedule(loc, Window{Day: time.Monday, Start: 4 * time.Hour, End: 2 * time.Hour}); err == nil {
		t.Error("an empty window was accepted")
	}
}

// TestCrawlerCalibration: the crawler feeds every page fetch to the
// calibrator (the signals themselves are TestCalibrator's; revisits come
// too slowly for a test to see a page slow down).
func TestCrawlerCalibration(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Write([]byte(`<html><title>home</title><body><a href="/a">a</a> <a href="/b">b</a></body></html>`))
		case "/a", "/b":
			w.Write([]byte("<html><title>page</title><body>words</body></html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	cal, err := NewCalibrator(CalibrationConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCrawler(t, &testSink{}, Calibration(cal, func(Slow) {}))
	if err := c.Submit(t.Context(), Request{Link: srv.URL + "/", Depth: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three pages observed", func() bool { return cal.Len() == 3 })
	if _, err := New(openMemDB(t), &testSink{}, Calibration(nil, nil)); err == nil {
		t.Error("calibration without a calibrator was accepted")
	}
}
