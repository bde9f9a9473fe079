package virtual

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain runs Run as a program would when the test binary is started by
// TestRun with VIRTUAL_CHILD set: the testing package's flags are not
// parsed then, as in a command.
func TestMain(m *testing.M) {
	if os.Getenv("VIRTUAL_CHILD") == "" {
		os.Exit(m.Run())
	}
	var slept time.Duration
	err := Run("Sleep", func(t *testing.T) {
		t0 := time.Now()
		time.Sleep(time.Hour)
		slept = time.Since(t0)
	})
	failed := Run("Fail", func(t *testing.T) { t.Error("failed on purpose") })
	fmt.Printf("slept=%v err=%v failed=%v\n", slept, err, failed != nil)
	os.Exit(0)
}

// TestRun: a function run by Run sleeps an hour of virtual time at once,
// a failing one is reported, and nothing of the testing package's own
// output reaches stdout.
func TestRun(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "VIRTUAL_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), "slept=1h0m0s err=<nil> failed=true"; got != want {
		t.Fatalf("stdout %q, want %q (stderr: %s)", got, want, stderr.String())
	}
}
