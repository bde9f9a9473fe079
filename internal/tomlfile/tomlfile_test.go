package tomlfile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestKeyLine(t *testing.T) {
	data := []byte("# c\nbandwidth = 1\n  \"dns\" = \"x\"\n[t]\nlisten=2\n")
	for key, want := range map[string]int{"bandwidth": 2, "dns": 3, "listen": 5, "absent": 0, "band": 0} {
		if got := KeyLine(data, key); got != want {
			t.Errorf("KeyLine(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestDecodeError(t *testing.T) {
	var v map[string]any
	_, err := toml.Decode("a = 1\nb = \n", &v)
	if got := DecodeError("f.toml", err).Error(); !strings.HasPrefix(got, "f.toml:2: ") {
		t.Errorf("syntax error: %q", got)
	}
}

func TestDecode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("# c\nb = 1\na = \"x\"\n[t]\nc = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	_, keys, err := Decode(path, &v)
	if err != nil {
		t.Fatal(err)
	}
	want := []Key{{"b", path + ":2"}, {"a", path + ":3"}, {"t", path + ":0"}}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if got := Unknown(keys[0], []string{"bb", "zzzz"}).Error(); got != path+`:2: unknown key "b" (did you mean "bb"?)` {
		t.Errorf("Unknown: %q", got)
	}
	if err := os.WriteFile(path, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Decode(path, &v); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("oversized file: %v", err)
	}
}
