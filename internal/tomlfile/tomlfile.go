// Package tomlfile helps name where a problem of a TOML configuration file
// is: the line a top-level key is set on, and a syntax error as FILE:LINE.
package tomlfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/micra-net/micra/internal/suggest"
)

// MaxSize bounds a configuration file in bytes.
const MaxSize = 1 << 20

// Key is a top-level key of a file and where it is set: FILE:LINE.
type Key struct {
	Name string
	At   string
}

// Decode reads the TOML file at path, of at most MaxSize bytes, into v and
// returns its metadata and its top-level keys in file order; the keys set
// inside a table are left to the table's key. Its errors name the file,
// and a syntax error its line (DecodeError).
func Decode(path string, v any) (toml.MetaData, []Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return toml.MetaData{}, nil, err
	}
	if len(data) > MaxSize {
		return toml.MetaData{}, nil, fmt.Errorf("%s: larger than 1 MiB", path)
	}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(v)
	if err != nil {
		return md, nil, DecodeError(path, err)
	}
	var keys []Key
	for _, k := range md.Keys() {
		if len(k) == 1 {
			keys = append(keys, Key{Name: k[0], At: fmt.Sprintf("%s:%d", path, KeyLine(data, k[0]))})
		}
	}
	return md, keys, nil
}

// Unknown is the error of k, a key that is none of known: FILE:LINE:
// unknown key "k", with the key it was probably meant to be.
func Unknown(k Key, known []string) error {
	hint := ""
	if s, ok := suggest.Closest(k.Name, known); ok {
		hint = fmt.Sprintf(" (did you mean %q?)", s)
	}
	return fmt.Errorf("%s: unknown key %q%s", k.At, k.Name, hint)
}

// KeyLine is the line of data on which the top-level key is set (bare or
// quoted), 0 when not found.
func KeyLine(data []byte, key string) int {
	q := regexp.QuoteMeta(key)
	re := regexp.MustCompile(`^\s*(` + q + `|"` + q + `"|'` + q + `')\s*=`)
	for i, line := range strings.Split(string(data), "\n") {
		if re.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// DecodeError names a decoding error of file: FILE:LINE: message for a
// syntax error, FILE: error otherwise.
func DecodeError(file string, err error) error {
	var perr toml.ParseError
	if errors.As(err, &perr) {
		return fmt.Errorf("%s:%d: %s", file, perr.Position.Line, perr.Message)
	}
	return fmt.Errorf("%s: %w", file, err)
}
