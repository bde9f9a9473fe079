package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestVersion: micra version and micra --version print the module's
// version and the Go version from the build information.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || !strings.HasPrefix(out, "micra ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("%v: exit %d, %q %q", args, code, out, errs)
		}
	}
	if code, _, _ := runCmd(t, "version", "extra"); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
