package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/micra-net/micra/subnet"
)

func sampleStatus() Status {
	t0 := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	st := Status{
		PeerStatus: PeerStatus{Peer: "12D3KooWExample", Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}, Snapshot: "b6a3ee1a0d96",
			Started: t0, Now: t0.Add(90 * time.Minute), Peers: 7, Shards: 3},
		Capacity: 10000, Load: 1234,
		Window: Window{Open: true}, Crawl: Crawl{Fetched: 4321, Queued: 55, Records: 4000,
			Crawling: []string{"docs.example.net:8080", "www.example.org"}, TodayBytes: 3 << 29, DailyCap: 10 << 30},
		Outbox: Outbox{Batches: 2, Bytes: 3 << 20, Cap: 512 << 20}, Probes: Probes{Run: 17, Issued: 9},
		Subnets: []Subnet{
			{Range: "127.1.2.0/24", Org: `<script>alert("x")</script>`, RTTms: 12.5, Since: t0},
			{Range: "127.9.0.0/16", Org: "org:ORG-EH1-RIPE", OrgName: "Example Hosting Ltd", RTTms: 48},
			{Range: "127.3.0.0/24", Org: "No probe yet", RTTms: -1},
		},
		Warnings: []string{"outbox 90 % full"},
		Changes: []Change{
			{At: t0.Add(time.Hour), Range: "127.1.2.0/24", Gained: true, Own: true, Reason: "the subnet of this node's address, claimed"},
			{At: t0.Add(30 * time.Minute), Range: "127.1.2.0/24", Own: true, Reason: "its coordinator no longer lists this node's claim; claimed again"},
		},
		Map: []Place{{Kind: "self", Label: "this node", Country: "CY", X: 213.4, Y: 54.8},
			{Kind: "peer", Label: "12D3KooWPeer", Country: "DE", X: 188.8, Y: 39.9},
			{Kind: "subnet", Label: "127.1.2.0/24", Country: "US", X: 97.1, Y: 50},
			{Kind: "subnet", Label: "127.9.0.0/16", Country: "JP", X: 319.8, Y: 54.3}},
		Adopted: 6,
		Trust:   Trust{ClaimsRejected: 3, Barred: []string{"12D3KooWLiar"}, TakenBack: map[string]int64{"orphaned": 5, "convicted": 2, "withheld": 4}},
	}
	for i := 0; i < 30; i++ {
		st.RateChart = append(st.RateChart, Point{T: t0.Add(time.Duration(i) * time.Minute), V: float64(i % 7 * 10)})
	}
	return st
}

func TestDashboard(t *testing.T) {
	st := sampleStatus()
	srv := httptest.NewServer(Dashboard(func(context.Context) (Status, error) { return st, nil }, "", http.NotFoundHandler()))
	defer srv.Close()
	get := func(path string) (int, string, http.Header) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, h := get("/api/status")
	var got Status
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Crawl.Fetched != 4321 || len(got.Subnets) != 3 ||
		got.Adopted != 6 || got.Trust.ClaimsRejected != 3 || got.Trust.TakenBack["convicted"] != 2 || got.Trust.TakenBack["withheld"] != 4 || len(got.Trust.Barred) != 1 {
		t.Fatalf("api: %d %s", code, body)
	}
	code, body, h = get("/")
	if code != 200 || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("page: %d %v", code, h)
	}
	for _, want := range []string{`id="fetched">4,321<`, `id="peers">7<`, `id="shards">3<`, `&lt;script&gt;`, "<svg", "12.5", "db-ip.com",
		`id="claims-rejected">3<`, `id="adopted">6<`, "2 convicted 5 orphaned 4 withheld", "12D3KooWLiar",
		`id="load">12.3 %<`, "1,234 of 10,000 pages a day", `id="today">1.5 GiB<`, "of the 10 GiB daily cap",
		"<code>docs.example.net:8080</code>, <code>www.example.org</code>", `Example Hosting Ltd <span class="muted">org:ORG-EH1-RIPE</span>`,
		`id="rate-now">now: 10 pages a minute<`, `id="map"`, `<circle class="place-self" cx="213.4" cy="54.8"`, "<title>12D3KooWPeer (DE)</title>", ">29 min ago<", ">60<", ">30<"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(body, `<script>alert`) {
		t.Error("an organisation name was not escaped")
	}
	if code, _, _ := get("/nope"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
	failing := httptest.NewServer(Dashboard(func(context.Context) (Status, error) { return Status{}, errors.New("node stopping") }, "", nil))
	defer failing.Close()
	if resp, err := http.Get(failing.URL + "/"); err != nil || resp.StatusCode != 503 {
		t.Errorf("status error: %v %v", resp, err)
	}
}

func TestDashboardToken(t *testing.T) {
	const token = "0123456789abcdef0123"
	srv := httptest.NewServer(Dashboard(func(context.Context) (Status, error) { return sampleStatus(), nil }, token, nil))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		status int
	}{
		{"no token", func() *http.Request { r, _ := http.NewRequest("GET", srv.URL+"/api/status", nil); return r }, 401},
		{"wrong token", func() *http.Request {
			r, _ := http.NewRequest("GET", srv.URL+"/api/status", nil)
			r.Header.Set("Authorization", "Bearer nope")
			return r
		}, 401},
		{"bearer", func() *http.Request {
			r, _ := http.NewRequest("GET", srv.URL+"/api/status", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			return r
		}, 200},
		{"query", func() *http.Request { r, _ := http.NewRequest("GET", srv.URL+"/?token="+token, nil); return r }, 200},
	} {
		resp, err := http.DefaultClient.Do(tc.req())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
}

// chromium returns Debian's Chromium, skipping the test without it (CI
// installs it and must run this test).
func chromium(t *testing.T) string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI must install chromium (apt-get install chromium)")
	}
	t.Skip("chromium not installed")
	return ""
}

// TestDashboardInChromium loads the page in headless Chromium, checks that
// the numbers it shows are those of the API, and saves a screenshot as a
// test artifact (MICRA_ARTIFACTS, default the test's temporary directory).
func TestDashboardInChromium(t *testing.T) {
	bin := chromium(t)
	st := sampleStatus()
	srv := httptest.NewServer(Dashboard(func(context.Context) (Status, error) { return st, nil }, "", nil))
	defer srv.Close()
	out := os.Getenv("MICRA_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, "dashboard.png")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--window-size=1200,1400"}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(append(args, extra...), srv.URL+"/")...)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		return b
	}
	dom := string(run("--dump-dom"))
	// The numbers the browser rendered are the API's.
	api := map[string]int64{"peers": int64(st.Peers), "shards": int64(st.Shards), "fetched": st.Crawl.Fetched,
		"queued": st.Crawl.Queued, "outbox": int64(st.Outbox.Batches), "probes-run": st.Probes.Run,
		"probes-issued": st.Probes.Issued, "subnets": int64(len(st.Subnets))}
	for id, want := range api {
		m := regexp.MustCompile(`id="` + id + `">([0-9,]+)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Errorf("%s not shown", id)
			continue
		}
		if got, _ := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64); got != want {
			t.Errorf("%s shows %d, the API says %d", id, got, want)
		}
	}
	// The facts in words are the API's too: today's bytes against the
	// cap, the share of the capacity delegated, the hosts crawled now.
	for _, want := range []string{
		`id="today">` + humanize.IBytes(uint64(st.Crawl.TodayBytes)) + "<",
		"of the " + humanize.IBytes(uint64(st.Crawl.DailyCap)) + " daily cap",
		fmt.Sprintf(`id="load">%.1f %%<`, 100*float64(st.Load)/float64(st.Capacity)),
		"<code>" + strings.Join(st.Crawl.Crawling, "</code>, <code>") + "</code>",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the browser shows no %q", want)
		}
	}
	// The map shows one dot per place of the API, of its kind, over the land.
	for _, kind := range []string{"self", "peer", "subnet"} {
		want := 0
		for _, p := range st.Map {
			if p.Kind == kind {
				want++
			}
		}
		if got := strings.Count(dom, `class="place-`+kind+`"`); got != want {
			t.Errorf("the map shows %d %s dots, the API lists %d", got, kind, want)
		}
	}
	if !regexp.MustCompile(`<path fill="#d9d9d9"[^>]* d="M[0-9]`).MatchString(dom) {
		t.Error("the map has no land")
	}
	tableRows := func(id string) int {
		m := regexp.MustCompile(`(?s)<table id="` + id + `">(.*?)</table>`).FindStringSubmatch(dom)
		if m == nil {
			return -1
		}
		return strings.Count(m[1], "<tr>") - 1
	}
	if n := tableRows("subnet-table"); n != len(st.Subnets) {
		t.Errorf("subnet table has %d rows, want %d", n, len(st.Subnets))
	}
	if n := tableRows("changes"); n != len(st.Changes) {
		t.Errorf("changes table has %d rows, want %d", n, len(st.Changes))
	}
	for _, c := range st.Changes {
		if !strings.Contains(dom, c.Reason) {
			t.Errorf("the browser shows no %q", c.Reason)
		}
	}
	run("--screenshot=" + shot)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 1000 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("screenshot: %s", shot)
}

// TestReleaseHandler: POST /api/release hands a release and its file to
// the node; a wrong content type, a short or oversized body, a refusal by
// the node and a missing token are answered with their reasons.
func TestReleaseHandler(t *testing.T) {
	var gotRel, gotFile []byte
	publish := func(ctx context.Context, rel, file []byte) error {
		if string(file) == "refuse" {
			return errors.New("untrusted release: signed by someone else")
		}
		gotRel, gotFile = rel, file
		return nil
	}
	const token = "0123456789abcdef"
	srv := httptest.NewServer(ReleaseHandler(publish, token))
	defer srv.Close()
	post := func(ctype, tok string, body []byte) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/api/release", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	rel := bytes.Repeat([]byte{1}, subnet.ReleaseSize)
	body := append(bytes.Clone(rel), "snapshot bytes"...)
	if code, msg := post(ReleaseContentType, token, body); code != http.StatusNoContent || !bytes.Equal(gotRel, rel) || string(gotFile) != "snapshot bytes" {
		t.Fatalf("a release: %d %s", code, msg)
	}
	for _, c := range []struct {
		name, ctype, token string
		body               []byte
		code               int
		want               string
	}{
		{"no token", ReleaseContentType, "", body, http.StatusUnauthorized, "token"},
		{"form post", "application/x-www-form-urlencoded", token, body, http.StatusUnsupportedMediaType, ReleaseContentType},
		{"release only", ReleaseContentType, token, rel, http.StatusBadRequest, "snapshot file are needed"},
		{"refused", ReleaseContentType, token, append(bytes.Clone(rel), "refuse"...), http.StatusBadRequest, "untrusted release"},
		{"too large", ReleaseContentType, token, make([]byte, subnet.ReleaseSize+maxReleaseUpload+1), http.StatusRequestEntityTooLarge, "too large"},
	} {
		if code, msg := post(c.ctype, c.token, c.body); code != c.code || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, code, msg, c.code, c.want)
		}
	}
	// The page shows a pending release.
	st := sampleStatus()
	st.Release = &Release{Snapshot: "c0ffee", Activation: st.Now.Add(time.Hour), Holders: 3}
	page := httptest.NewServer(Dashboard(func(context.Context) (Status, error) { return st, nil }, "", nil))
	defer page.Close()
	resp, err := http.Get(page.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `id="release">next snapshot <code>c0ffee</code>`) || !strings.Contains(string(b), "3 peers hold it") {
		t.Errorf("page lacks the pending release:\n%s", b)
	}
}
