package tomlfile

import (
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
