// Package realdata finds the real data that micra's evaluations and some
// tests read (../shared/data beside a checkout, or $MICRA_DATA: registry
// files, the latency matrix, geolocation; see README, "Data and
// licences"), and lets a test that needs it say so. None of it ships with
// the repository: a clean clone runs everything else without it.
//
// realdata imports nothing of micra's.
package realdata

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Env names the environment variable that points at the data directory.
const Env = "MICRA_DATA"

// ErrNotFound is returned when no data directory holds the files asked for.
var ErrNotFound = errors.New("real data not found")

// Find returns the data directory that holds every file of rels (paths
// relative to it): dir when not empty, else $MICRA_DATA when set, else the
// first "shared/data" (or "data") found beside the working directory or
// one of its parents, as a checkout keeps ../shared beside the repository.
// A directory named by dir or $MICRA_DATA that lacks a file is an error
// naming it; nothing else is tried then.
func Find(dir string, rels ...string) (string, error) {
	missing := func(d string) string {
		for _, r := range rels {
			if _, err := os.Stat(filepath.Join(d, r)); err != nil {
				return r
			}
		}
		return ""
	}
	if dir != "" {
		if m := missing(dir); m != "" {
			return "", fmt.Errorf("%w: %s has no %s", ErrNotFound, dir, m)
		}
		return dir, nil
	}
	if env := os.Getenv(Env); env != "" {
		if m := missing(env); m != "" {
			return "", fmt.Errorf("%w: $%s=%s has no %s", ErrNotFound, Env, env, m)
		}
		return env, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		for _, c := range []string{filepath.Join(d, "shared", "data"), filepath.Join(d, "data")} {
			if missing(c) == "" {
				return c, nil
			}
		}
		p := filepath.Dir(d)
		if p == d {
			break
		}
		d = p
	}
	return "", fmt.Errorf("%w: no shared/data with %s beside %s or its parents; set $%s", ErrNotFound, strings.Join(rels, ", "), wd, Env)
}

// TB is the part of testing.TB that Need uses.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Need returns the data directory holding every file of rels, for a test
// that measures something on real data. Without them the test is skipped,
// saying what it needs; under CI=true, where the data is always beside the
// checkout, it fails instead.
func Need(t TB, rels ...string) string {
	t.Helper()
	dir, err := Find("", rels...)
	if err == nil {
		return dir
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("this test needs the real data: %v", err)
	}
	t.Skipf("this test needs the real data (%v); it runs where ../shared/data or $%s has it", err, Env)
	return ""
}
