//go:build unix

package pgserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// debianRoot is where Debian's postgresql-<version> packages put each
// version's binaries, as debianRoot/<version>/bin.
const debianRoot = "/usr/lib/postgresql"

// installHint tells what to do about ErrUnavailable.
const installHint = "install them with `apt-get install postgresql-15`, or set PG_BIN to the directory holding initdb and postgres"

// binaries are the absolute paths of the PostgreSQL programs Start runs.
type binaries struct {
	initdb, postgres string
}

// findBinaries looks for initdb and postgres in $PG_BIN if it is set (and
// nowhere else then), else in the newest debianRoot/<version>/bin that
// has initdb, else on $PATH. Its error wraps ErrUnavailable.
func findBinaries() (binaries, error) {
	if dir := os.Getenv("PG_BIN"); dir != "" {
		b, err := binariesIn(dir)
		if err != nil {
			return binaries{}, fmt.Errorf("%w in PG_BIN=%s (%v): %s", ErrUnavailable, dir, err, installHint)
		}
		return b, nil
	}
	for _, dir := range debianBinDirs() {
		if b, err := binariesIn(dir); err == nil {
			return b, nil
		}
	}
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return binaries{initdb: initdb, postgres: postgres}, nil
	}
	return binaries{}, fmt.Errorf("%w in %s/*/bin or on $PATH: %s", ErrUnavailable, debianRoot, installHint)
}

// binariesIn returns dir's initdb and postgres if both are executable files.
func binariesIn(dir string) (binaries, error) {
	b := binaries{initdb: filepath.Join(dir, "initdb"), postgres: filepath.Join(dir, "postgres")}
	for _, p := range []string{b.initdb, b.postgres} {
		fi, err := os.Stat(p)
		if err != nil {
			return binaries{}, err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return binaries{}, fmt.Errorf("%s is not an executable file", p)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return binaries{}, err
	}
	return binaries{initdb: filepath.Join(abs, "initdb"), postgres: filepath.Join(abs, "postgres")}, nil
}

// debianBinDirs returns debianRoot/<version>/bin for every version
// directory there, newest first.
func debianBinDirs() []string {
	entries, err := os.ReadDir(debianRoot)
	if err != nil {
		return nil
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	var dirs []string
	for _, v := range newestFirst(names) {
		dirs = append(dirs, filepath.Join(debianRoot, v, "bin"))
	}
	return dirs
}

// newestFirst returns the names that are versions, such as "15" or
// "9.6", sorted newest first ("16" before "15" before "9.6").
func newestFirst(names []string) []string {
	var versions []string
	for _, n := range names {
		if versionKey(n) != nil {
			versions = append(versions, n)
		}
	}
	slices.SortFunc(versions, func(a, b string) int {
		return slices.Compare(versionKey(b), versionKey(a))
	})
	return versions
}

// versionKey parses a version such as "15" or "9.6" into its numbers, or
// returns nil if v is not one.
func versionKey(v string) []int {
	var key []int
	for part := range strings.SplitSeq(v, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil
		}
		key = append(key, n)
	}
	return key
}
