package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplySettings: flags win over variables, variables over the file;
// lists join with commas; every problem is named where it came from.
func TestApplySettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.toml")
	os.WriteFile(path, []byte("listen = [\"/a\", \"/b\"]\nshards = 4\nhttp = \"127.0.0.1:1\"\nread_only = true\n"), 0o644)
	fs := newFlagSet("x", "", io.Discard)
	listen := fs.String("listen", "", "")
	shards := fs.Int("shards", 1, "")
	httpAddr := fs.String("http", "", "")
	ro := fs.Bool("read-only", false, "")
	if err := parseFlags(fs, []string{"--http", "127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	err := applySettings(fs, path, []string{"MICRA_X_SHARDS=8", "MICRA_X_HTTP=127.0.0.1:2", "MICRA_OTHER=1"}, "MICRA_X_")
	if err != nil {
		t.Fatal(err)
	}
	if *listen != "/a,/b" || *shards != 8 || *httpAddr != "127.0.0.1:3" || !*ro {
		t.Errorf("listen %q, shards %d, http %q, read-only %v", *listen, *shards, *httpAddr, *ro)
	}

	os.WriteFile(path, []byte("# x\nshards = \"many\"\nshrads = 2\n"), 0o644)
	fs = newFlagSet("x", "", io.Discard)
	fs.Int("shards", 1, "")
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	err = applySettings(fs, path, []string{"MICRA_X_SHARDS=lots"}, "MICRA_X_")
	for _, want := range []string{
		path + `:2: shards: parse error`,
		path + `:3: unknown key "shrads" (did you mean "shards"?)`,
		`MICRA_X_SHARDS: parse error`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("lacks %q: %v", want, err)
		}
	}
}
