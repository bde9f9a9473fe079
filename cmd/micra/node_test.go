package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/node"
)

func TestNodeFlagsCoverConfig(t *testing.T) {
	for _, k := range node.Keys() {
		if nodeFlags[k] == "" {
			t.Errorf("configuration key %q has no flag help", k)
		}
		if _, ok := tomlView(node.DefaultConfig())[k]; !ok {
			t.Errorf("configuration key %q missing from tomlView", k)
		}
	}
	if len(nodeFlags) != len(node.Keys()) {
		t.Errorf("%d flag helps for %d keys", len(nodeFlags), len(node.Keys()))
	}
	code, _, errs := runCmd(t, "node", "--help")
	if code != 0 || !strings.Contains(errs, "-capacity PAGES") || !strings.Contains(errs, "increasing precedence") {
		t.Errorf("help: exit %d\n%s", code, errs)
	}
}

// TestNodeConfigPrecedence: flags win over the environment, which wins
// over the file, which wins over the defaults.
func TestNodeConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "micra.toml")
	os.WriteFile(file, []byte("capacity = 100\nbandwidth = \"2MiB\"\nlog_level = \"warn\"\nthreshold = \"75ms\"\n"), 0o600)
	env := []string{"MICRA_CONFIG=" + file, "MICRA_CAPACITY=200", "MICRA_LOG_LEVEL=debug",
		"MICRA_WINDOWS=mon-fri 00:00-06:00;sat,sun 00:00-24:00"}
	cfg, err := nodeConfig([]string{"--capacity", "300", "--allow-private-networks", "--allow-ports", "8080,8081"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := node.DefaultConfig()
	want.Capacity = 300              // flag over env over file
	want.Bandwidth = "2MiB"          // file over default
	want.LogLevel = "debug"          // env over file
	want.Threshold = "75ms"          // file
	want.AllowPrivateNetworks = true // flag
	want.AllowPorts = []uint16{8080, 8081}
	want.Windows = []string{"mon-fri 00:00-06:00", "sat,sun 00:00-24:00"}
	if cfg.Capacity != want.Capacity || cfg.Bandwidth != want.Bandwidth || cfg.LogLevel != want.LogLevel ||
		cfg.Threshold != want.Threshold || !cfg.AllowPrivateNetworks || len(cfg.AllowPorts) != 2 ||
		strings.Join(cfg.Windows, "|") != strings.Join(want.Windows, "|") {
		t.Errorf("config\n got %+v\nwant %+v", cfg, want)
	}

	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--capacity", "lots"}, nil, "capacity"},
		{[]string{"--threshold", "0s"}, nil, "threshold"},
		{[]string{"--dashboard", "0.0.0.0:7464"}, nil, "dashboard_token"},
		{nil, []string{"MICRA_CAPACITY=x"}, "MICRA_CAPACITY"},
		{[]string{"--config", filepath.Join(t.TempDir(), "missing.toml")}, nil, "missing.toml"},
		{[]string{"stray"}, nil, "unexpected argument"},
	} {
		_, err := nodeConfig(tc.args, tc.env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: want an error naming %q, got %v", tc.args, tc.env, tc.want, err)
		}
	}
}

func TestStatusCommand(t *testing.T) {
	st := node.Status{PeerStatus: node.PeerStatus{Peer: "12D3KooWTest", Peers: 3, Shards: 2}, Capacity: 1000, Load: 10,
		Window: node.Window{Open: true}, Crawl: node.Crawl{Fetched: 42, TodayBytes: 3 << 20, DailyCap: 1 << 30, Crawling: []string{"a.example", "b.example"}},
		Subnets:  []node.Subnet{{Range: "127.1.2.0/24", Org: "org:EX1", OrgName: "Example Ltd", RTTms: 12.5}},
		Warnings: []string{"no indexer known: results wait in the outbox"}}
	const token = "0123456789abcdef0123"
	srv := httptest.NewServer(node.Dashboard(func(context.Context) (node.Status, error) { return st, nil }, token, nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, out, errs := runCmd(t, "status", "--dashboard", addr, "--token", token)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"12D3KooWTest", "42 pages fetched", "127.1.2.0/24", "12.5 ms", "warning: no indexer",
		"1,000 pages a day offered, 10 delegated (1.0 %)", "3.0 MiB of 1.0 GiB", "a.example, b.example", "Example Ltd (org:EX1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if code, _, errs := runCmd(t, "status", "--dashboard", addr); code != 1 || !strings.Contains(errs, "401") {
		t.Errorf("without the token: exit %d, %s", code, errs)
	}
	srv.Close()
	if code, _, errs := runCmd(t, "status", "--dashboard", addr, "--token", token); code != 1 || !strings.Contains(errs, "no node answers") {
		t.Errorf("no node: exit %d, %s", code, errs)
	}
}

// TestDemo runs a short demo and checks that it reports every part:
// nodes with dashboards, the indexer, the crawl's figures, the
// delegation-quality table and a sample search. The dashboards answer
// while it runs. It runs with the latency map (--map); CI's run of the
// README's command covers the demo without it.
func TestDemo(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("the demo takes half a minute; under -race the node tests cover its parts")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--nodes", "4", "--sites", "30", "--duration", "25s", "--map", "--linger"}, out, out)
	}()
	// While it runs, the first node's dashboard answers.
	dash := regexp.MustCompile(`(?m)^0 .*(http://127\.0\.0\.1:\d+/)`)
	var reached bool
	for range 600 {
		if m := dash.FindStringSubmatch(out.String()); m != nil {
			resp, err := http.Get(m[1] + "api/status")
			if err == nil {
				reached = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// After the summary it lingers: micra search answers typed queries
	// on the demo's indexer, as the README shows.
	var typed string
	for range 1800 {
		if strings.Contains(out.String(), "running until interrupted") {
			typed = demoTypedSearch(t, out.String())
			break
		}
		select {
		case code := <-done:
			t.Fatalf("exit %d before lingering:\n%s", code, out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	code := <-done
	text := out.String()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, text)
	}
	if !reached {
		t.Errorf("node 0's dashboard did not answer while the demo ran:\n%s", text)
	}
	for _, want := range []string{"latencies: ", "4 nodes and the indexer joined", "sites delegated", "Delegation quality", "optimal", "excess per URL", "IPMicra paper", "by random assignment", "Inter-node RTTs the coordinators measured", "Indexer:"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	if m := regexp.MustCompile(`micra search --api http://\S+ \S+ → (\d+) pages`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Errorf("no sample search with hits:\n%s", text)
	}
	if typed == "" {
		t.Errorf("no typed search ran:\n%s", text)
	}
}

// demoTypedSearch runs micra search type:TYPE on the indexer of a demo's
// output, for the type of the demo's sample typed search, and checks it
// finds as many pages, each of that type. It returns the query.
func demoTypedSearch(t *testing.T, text string) string {
	t.Helper()
	// The command as the demo prints it, with its --api address.
	sample := regexp.MustCompile(`micra search --api (http://127\.0\.0\.1:\d+) (type:\S+) → (\d+) pages`).FindStringSubmatch(text)
	if sample == nil {
		t.Errorf("no sample typed search with the indexer's address:\n%s", text)
		return ""
	}
	api, query, pages := sample[1], sample[2], sample[3]
	code, out, errs := runCmd(t, "search", "--api", api, "--limit", "100", query)
	if code != 0 || !strings.Contains(out, pages+" results for "+strconv.Quote(query)) {
		t.Errorf("micra search %s: exit %d, %s %s; the demo found %s pages", query, code, out, errs, pages)
	}
	// Every hit (up to 100) lists its types, the one searched among them.
	typeName := strings.TrimPrefix(query, "type:")
	hits := regexp.MustCompile(`(?m)^ +\d+\. `).FindAllString(out, -1)
	typed := 0
	for _, m := range regexp.MustCompile(`(?m)^ +types: (.*)$`).FindAllStringSubmatch(out, -1) {
		if slices.Contains(strings.Split(m[1], ", "), typeName) {
			typed++
		}
	}
	if len(hits) == 0 || typed != len(hits) {
		t.Errorf("micra search %s: %d hits, %d of them of the type:\n%s", query, len(hits), typed, out)
	}
	t.Logf("micra search %s:\n%s", query, out)
	return query
}

// TestNodeConfigMistakes: a mistyped flag is named with the flag it was
// probably meant to be, in one line rather than the list of every flag;
// a misspelled MICRA_ variable is warned of, with the one it was meant
// to be; errors carry no "usage:" of their own.
func TestNodeConfigMistakes(t *testing.T) {
	code, _, errs := runCmd(t, "node", "--bandwdith", "1MiB")
	want := "micra node: unknown flag --bandwdith (did you mean --bandwidth?); \"micra node -h\" lists the flags\n"
	if code != 2 || errs != want {
		t.Errorf("mistyped flag: exit %d, stderr %q; want 2, %q", code, errs, want)
	}
	var stderr strings.Builder
	_, err := nodeConfig([]string{"--capacity", "5"}, []string{"MICRA_CAPACTIY=5", "MICRA_DATA=/x", "MICRA_LOG_LEVEL=warn", "PATH=/bin"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); got != "micra node: warning: MICRA_CAPACTIY is not a variable micra reads; ignored (did you mean MICRA_CAPACITY?)\n" {
		t.Errorf("warnings: %q", got)
	}
	code, _, errs = runCmd(t, "node", "--capacity", "lots")
	if code != 2 || strings.Contains(errs, "usage") || !strings.Contains(errs, "--capacity") {
		t.Errorf("bad value: exit %d, %q", code, errs)
	}
}
