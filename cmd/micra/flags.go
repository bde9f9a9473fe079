package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/micra-net/micra/internal/suggest"
)

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints its usage to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: micra %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning a flag error into a usage error that
// names the flag, suggests the flag it was probably meant to be, and
// points to -h, rather than printing every flag. -h prints them.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = fmt.Sprintf("unknown flag --%s", name)
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s, ok := suggest.Closest(name, names); ok {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
	}
	return fmt.Errorf("%w: %s; \"micra %s -h\" lists the flags", errUsage, msg, fs.Name())
}

// parseNoArgs parses args with parseFlags; an argument left after the
// flags is a usage error.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil || fs.NArg() == 0 {
		return err
	}
	return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
}

// parseArgs parses args with parseFlags and checks the arguments left
// after the flags: unless valid(fs.NArg()), it prints the usage and
// returns a usage error saying want.
func parseArgs(fs *flag.FlagSet, args []string, valid func(n int) bool, want string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !valid(fs.NArg()) {
		fs.Usage()
		return fmt.Errorf("%w: %s", errUsage, want)
	}
	return nil
}

// atLeast and exactly are parseArgs' checks of the number of arguments.
func atLeast(k int) func(n int) bool { return func(n int) bool { return n >= k } }
func exactly(k int) func(n int) bool { return func(n int) bool { return n == k } }
