package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestSubnetLookup(t *testing.T) {
	code, out, errs := runCmd(t, "subnet", "lookup", "193.0.6.139", "2001:67c:2e8::1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"193.0.0.0/8", "193.0.0.0/21", "2001:600::/23", "2001:67c:2e8::/48", "<- smallest non-unary", "ripencc"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCmd(t, "subnet", "lookup", "--json", "193.0.6.139", "2001:67c:2e8::1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	for _, want := range []struct {
		addr, smallest string
		chain          int
	}{{"193.0.6.139", "193.0.0.0", 4}, {"2001:67c:2e8::1", "2001:67c:2e8::", 3}} {
		var v struct {
			Address string `json:"address"`
			Chain   []struct {
				Start, End, Org, Country, Registry string
				Depth                              int
			} `json:"chain"`
			Smallest struct {
				Start string `json:"start"`
				Depth int    `json:"depth"`
			} `json:"smallest_non_unary"`
		}
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if v.Address != want.addr || len(v.Chain) != want.chain || v.Smallest.Start != want.smallest || v.Chain[0].Depth != 0 || v.Chain[0].Start == "" {
			t.Errorf("json %+v", v)
		}
	}
	if code, _, errs := runCmd(t, "subnet", "lookup", "not-an-ip"); code != 2 || !strings.Contains(errs, "not an IP address") {
		t.Errorf("bad address: exit %d, %s", code, errs)
	}
	if code, _, _ := runCmd(t, "subnet", "lookup"); code != 2 {
		t.Errorf("no address: exit %d", code)
	}
}

func TestSubnetImportAndStats(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "delegated-test")
	os.WriteFile(in, []byte("2|apnic|20130813|2|19850701|20130812|+1000\napnic|AU|ipv4|10.0.0.0|256|20000101|allocated|A\napnic|AU|ipv4|10.0.1.0|oops|20000101|allocated\n"), 0o644)
	snap := filepath.Join(dir, "t.snap")
	code, out, errs := runCmd(t, "subnet", "import", "--out", snap, in)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, in+":3: ipv4 count \"oops\"") || !strings.Contains(out, "wrote "+snap) {
		t.Errorf("summary lacks the skipped line or the output file:\n%s", out)
	}
	code, out, _ = runCmd(t, "subnet", "lookup", "--snapshot", snap, "10.0.0.7")
	if code != 0 || !strings.Contains(out, "10.0.0.0/24") || !strings.Contains(out, "apnic:A") {
		t.Errorf("lookup in the imported snapshot: exit %d\n%s", code, out)
	}
	code, out, _ = runCmd(t, "subnet", "stats", "--snapshot", snap, "--json")
	var st struct {
		Ranges   int `json:"ranges"`
		MaxDepth int `json:"max_depth"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Ranges != 1 || st.MaxDepth != 1 {
		t.Errorf("stats: exit %d %+v\n%s", code, st, out)
	}
	code, _, errs = runCmd(t, "subnet", "import", "--strict", in)
	if code != 1 || !strings.Contains(errs, in+":3:") {
		t.Errorf("--strict: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := runCmd(t, "subnet", "stats", "--snapshot", in); code != 1 || !strings.Contains(errs, "corrupt snapshot") {
		t.Errorf("stats on a non-snapshot: exit %d %q", code, errs)
	}
	if code, _, _ := runCmd(t, "subnet", "import", "--format", "xml", in); code != 2 {
		t.Errorf("bad format: exit %d", code)
	}
	if code, _, _ := runCmd(t, "nope"); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
	if code, out, _ := runCmd(t, "help"); code != 0 || !strings.Contains(out, "subnet") {
		t.Errorf("help: exit %d %q", code, out)
	}
}

func TestSubnetStatsEmbedded(t *testing.T) {
	code, out, errs := runCmd(t, "subnet", "stats")
	if code != 0 || !strings.Contains(out, "bytes per range") || !strings.Contains(out, "max depth") {
		t.Errorf("exit %d %s\n%s", code, errs, out)
	}
}
