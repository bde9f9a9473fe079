package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/micra-net/micra/node"
)

// importSnap builds a snapshot from one delegated file's records.
func importSnap(t *testing.T, dir, name string, records ...string) string {
	t.Helper()
	in := filepath.Join(dir, name+".txt")
	data := "2|apnic|20130813|" + string(rune('0'+len(records))) + "|19850701|20130812|+1000\n" + strings.Join(records, "\n") + "\n"
	if err := os.WriteFile(in, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name+".snap")
	if code, _, errs := runCmd(t, "subnet", "import", "--out", out, in); code != 0 {
		t.Fatalf("import %s: exit %d: %s", name, code, errs)
	}
	return out
}

func TestSubnetDiffAndRelease(t *testing.T) {
	dir := t.TempDir()
	oldSnap := importSnap(t, dir, "old",
		"apnic|AU|ipv4|10.0.0.0|256|20000101|allocated",
		"apnic|AU|ipv4|10.0.2.0|512|20000101|allocated",
		"apnic|AU|ipv4|10.0.8.0|256|20000101|allocated")
	newSnap := importSnap(t, dir, "new",
		"apnic|AU|ipv4|10.0.0.0|256|20000101|allocated",
		"apnic|AU|ipv4|10.0.2.0|256|20000101|allocated",
		"apnic|AU|ipv4|10.0.3.0|256|20000101|allocated",
		"apnic|AU|ipv4|10.0.9.0|256|20000101|allocated")

	code, out, errs := runCmd(t, "subnet", "diff", "--json", oldSnap, newSnap)
	if code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	var d jsonDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Unchanged != 1 || d.Split != 1 || d.Parts != 2 || d.Removed != 1 || d.Added != 1 || d.Merged != 0 || len(d.Examples) != 4 {
		t.Errorf("diff %+v", d)
	}
	if code, out, _ := runCmd(t, "subnet", "diff", oldSnap, newSnap); code != 0 || !strings.Contains(out, "10.0.2.0/23 -> 10.0.2.0/24 10.0.3.0/24") {
		t.Errorf("diff text: exit %d\n%s", code, out)
	}
	if code, _, _ := runCmd(t, "subnet", "diff", oldSnap); code != 2 {
		t.Errorf("diff of one snapshot: exit %d, want 2", code)
	}

	key := filepath.Join(dir, "release.key")
	code, out, errs = runCmd(t, "subnet", "keygen", "--out", key)
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errs)
	}
	pub := regexp.MustCompile(`ed25519:[A-Za-z0-9+/=]+`).FindString(out)
	if pub == "" {
		t.Fatalf("keygen printed no public key:\n%s", out)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	if code, _, _ := runCmd(t, "subnet", "keygen", "--out", key); code != 1 {
		t.Errorf("keygen over an existing key: exit %d, want 1", code)
	}
	otherKey := filepath.Join(dir, "other.key")
	_, otherOut, _ := runCmd(t, "subnet", "keygen", "--out", otherKey)
	otherPub := regexp.MustCompile(`ed25519:[A-Za-z0-9+/=]+`).FindString(otherOut)

	rel := filepath.Join(dir, "new.release")
	code, out, errs = runCmd(t, "subnet", "publish", "--key", key, "--parent", oldSnap, "--activate", "2h", "--out", rel, newSnap)
	if code != 0 || !strings.Contains(out, "wrote "+rel) {
		t.Fatalf("publish: exit %d: %s\n%s", code, errs, out)
	}
	if code, out, errs := runCmd(t, "subnet", "verify", "--keys", otherPub+","+pub, rel, newSnap); code != 0 || !strings.Contains(out, "release verified") {
		t.Errorf("verify: exit %d: %s\n%s", code, errs, out)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"other key", []string{"verify", "--keys", otherPub, rel}, 1, "untrusted release"},
		{"wrong snapshot", []string{"verify", "--keys", pub, rel, oldSnap}, 1, "does not match its release"},
		{"not a release", []string{"verify", "--keys", pub, newSnap}, 1, "malformed release"},
		{"bad key text", []string{"verify", "--keys", "ed25519:xx", rel}, 2, "release key"},
		{"activation too soon", []string{"publish", "--key", key, "--parent", oldSnap, "--activate", "1m", "--out", rel + "2", newSnap}, 1, "release time out of bounds"},
		{"activation unreadable", []string{"publish", "--key", key, "--parent", oldSnap, "--activate", "soon", newSnap}, 2, "neither an RFC 3339 time"},
		{"own parent", []string{"publish", "--key", key, "--parent", newSnap, newSnap}, 1, "its own parent"},
		{"a snapshot as the key", []string{"publish", "--key", newSnap, "--parent", oldSnap, newSnap}, 1, "malformed release"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append([]string{"subnet"}, c.args...)...)
			if code != c.code || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d (want %d), stderr %q, want %q in it", code, c.code, errs, c.want)
			}
		})
	}
	if _, err := os.Stat(rel + "2"); err == nil {
		t.Error("a refused release was written")
	}
}

// TestSubnetOffer hands a release to a node's dashboard API, which takes
// or refuses it.
func TestSubnetOffer(t *testing.T) {
	dir := t.TempDir()
	snap := importSnap(t, dir, "next", "apnic|AU|ipv4|10.0.0.0|256|20000101|allocated")
	key := filepath.Join(dir, "k")
	if code, _, errs := runCmd(t, "subnet", "keygen", "--out", key); code != 0 {
		t.Fatal(errs)
	}
	rel := filepath.Join(dir, "next.release")
	if code, _, errs := runCmd(t, "subnet", "publish", "--key", key, "--parent", "builtin", "--out", rel, snap); code != 0 {
		t.Fatal(errs)
	}
	var got []byte
	refuse := false
	publish := func(ctx context.Context, r, file []byte) error {
		if refuse {
			return errors.New("untrusted release")
		}
		got = append(bytes.Clone(r), file...)
		return nil
	}
	srv := httptest.NewServer(node.ReleaseHandler(publish, "0123456789abcdef"))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	code, out, errs := runCmd(t, "subnet", "offer", "--dashboard", addr, "--token", "0123456789abcdef", rel, snap)
	want, _ := os.ReadFile(rel)
	file, _ := os.ReadFile(snap)
	if code != 0 || !strings.Contains(out, "took the release") || !bytes.Equal(got, append(want, file...)) {
		t.Fatalf("offer: exit %d %s %s", code, out, errs)
	}
	refuse = true
	if code, _, errs := runCmd(t, "subnet", "offer", "--dashboard", addr, "--token", "0123456789abcdef", rel, snap); code != 1 || !strings.Contains(errs, "untrusted release") {
		t.Errorf("refused offer: exit %d %s", code, errs)
	}
	if code, _, errs := runCmd(t, "subnet", "offer", "--dashboard", addr, rel, snap); code != 1 || !strings.Contains(errs, "token") {
		t.Errorf("offer without the token: exit %d %s", code, errs)
	}
	if code, _, _ := runCmd(t, "subnet", "offer", "--dashboard", addr, snap, snap); code != 1 {
		t.Errorf("a snapshot as the release: exit %d", code)
	}
}
