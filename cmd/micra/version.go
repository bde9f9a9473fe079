package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func init() {
	commands["version"] = command{"print micra's version: module version, source revision and time, Go version", runVersion}
}

func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) != 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine describes this binary from its build information: the
// module version ("(devel)" for a build from a checkout), the VCS
// revision and commit time when the build recorded them ("+modified" for
// a tree with uncommitted changes), and the Go version.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "micra (no build information)"
	}
	var rev, at string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	parts := []string{"micra", bi.Main.Version}
	if rev != "" {
		r := rev[:min(12, len(rev))]
		if modified {
			r += "+modified"
		}
		parts = append(parts, "revision "+r)
	}
	if at != "" {
		parts = append(parts, at)
	}
	return strings.Join(append(parts, bi.GoVersion), " ")
}
