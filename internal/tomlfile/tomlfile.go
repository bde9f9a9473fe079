// Package tomlfile helps name where a problem of a TOML configuration file
// is: the line a top-level key is set on, and a syntax error as FILE:LINE.
package tomlfile

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
)

// MaxSize bounds a configuration file in bytes.
const MaxSize = 1 << 20

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
