// Package virtual runs a simulation in virtual time outside "go test": a
// testing/synctest bubble, in which time advances only when every
// goroutine of the bubble is blocked, so that a thousand libp2p hosts on a
// simulated network run their protocols on the simulation's clock however
// slow the machine is. synctest offers its bubbles only to tests
// (synctest.Test takes a *testing.T); Run obtains one by starting the
// testing package's runner as "go test" does (testing.MainStart), with one
// test that runs f.
//
// testing.MainStart is meant for generated test mains and may change from
// one Go release to the next; TestRun fails when it does. virtual is a rig
// for benchmarks (micra bench overlay); its bubble is p2ptest.Bubble's.
package virtual

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
)

// mu makes Run one at a time: the testing package keeps its state in
// globals.
var mu sync.Mutex

// Run runs f in a synctest bubble and returns an error when f failed (it
// called t.Error, t.Fatal or their kin) or panicked. The testing package's
// output ("--- FAIL" lines, t.Log output of a failed run) goes to stderr;
// stdout is left to the caller. One Run at a time in a process; Run sets
// up the testing package's flags on flag.CommandLine the first time.
func Run(name string, f func(t *testing.T)) (err error) {
	if !regexp.MustCompile(`^[A-Za-z0-9_]+$`).MatchString(name) {
		return fmt.Errorf("virtual: name %q is not a test name", name)
	}
	mu.Lock()
	defer mu.Unlock()
	tests := []testing.InternalTest{{Name: name, F: func(t *testing.T) { p2ptest.Bubble(t, f) }}}
	m := testing.MainStart(deps{}, tests, nil, nil, nil)
	if !flag.Parsed() {
		// The testing package's flags: run this test only, no timeout
		// (the caller bounds the simulation), failures to stderr.
		if err := flag.CommandLine.Parse([]string{"-test.run=^" + name + "$", "-test.timeout=0", "-test.count=1"}); err != nil {
			return err
		}
	} else if err := flag.Set("test.run", "^"+name+"$"); err != nil {
		return err
	}
	stdout := os.Stdout
	os.Stdout = os.Stderr // "PASS", "FAIL" and "--- FAIL" lines
	defer func() { os.Stdout = stdout }()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("virtual: %s panicked: %v", name, r)
		}
	}()
	if code := m.Run(); code != 0 {
		return errors.New("virtual: " + name + " failed")
	}
	return nil
}

// corpusEntry is testing's (an alias of an unnamed struct type).
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}

// deps implements the hooks testing.MainStart asks for: matching test
// names, and nothing of profiles, coverage or fuzzing.
type deps struct{}

func (deps) ImportPath() string { return "" }
func (deps) ModulePath() string { return "" }
func (deps) MatchString(pat, str string) (bool, error) {
	re, err := regexp.Compile(pat)
	if err != nil {
		return false, err
	}
	return re.MatchString(str), nil
}
func (deps) SetPanicOnExit0(bool)                        {}
func (deps) StartCPUProfile(io.Writer) error             { return errors.New("virtual: no profiles") }
func (deps) StopCPUProfile()                             {}
func (deps) StartTestLog(io.Writer)                      {}
func (deps) StopTestLog() error                          { return nil }
func (deps) WriteProfileTo(string, io.Writer, int) error { return errors.New("virtual: no profiles") }
func (deps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errors.New("virtual: no fuzzing")
}
func (deps) RunFuzzWorker(func(corpusEntry) error) error { return errors.New("virtual: no fuzzing") }
func (deps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) {
	return nil, errors.New("virtual: no fuzzing")
}
func (deps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (deps) ResetCoverage()                          {}
func (deps) SnapshotCoverage()                       {}
func (deps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}
