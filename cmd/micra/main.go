// Command micra is the one binary of micra: the volunteer node, the indexer,
// the emulated Internet and the tools around them, as subcommands.
//
// Usage:
//
//	micra <command> [arguments]
//
// Run "micra help" for the list of commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// runFunc runs a command or a subcommand of micra with the arguments after
// its name; it returns errUsage (possibly wrapped) when the arguments are
// wrong, so that main prints the command's usage and exits with status 2.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// command is one subcommand of micra.
type command struct {
	summary string
	run     runFunc
}

// commands is the table of subcommands. Each lives in its own file of this
// package and adds itself here.
var commands = map[string]command{
	"bench":   {"benchmarks: delegation (the IPMicra evaluation, on the emulated Internet or real structure), structure (real against generated), crawl (download time by assignment), overlay (the overlay at network size, virtual time), footprint (a node's CPU and memory), liars (the claim check), search (search quality on real manuals beside PostgreSQL's full-text search)", subcommands(benchCommands, benchUsage)},
	"indexer": {"run an indexer; manage its profiles, export, crawl requests", subcommands(indexerCommands, indexerServe)},
	"search":  {"search an indexer: micra search QUERY", runSearch},
	"subnet":  {"the IP-address hierarchy: import, lookup, stats", subcommands(subnetCommands, usageOnly(subnetUsage))},
	"world":   {"the emulated Internet on loopback: gen, serve, rtt", subcommands(worldCommands, usageOnly(worldUsage))},
}

// subcommand is one form of a command that has several, named by the
// command's first argument.
type subcommand struct {
	name string
	run  runFunc
}

// findSub returns the run of the subcommand of subs that args[0] names.
func findSub(subs []subcommand, args []string) (runFunc, bool) {
	if len(args) == 0 {
		return nil, false
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run, true
		}
	}
	return nil, false
}

// subNames returns the names of subs, in their order.
func subNames(subs []subcommand) []string {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	return names
}

// subcommands returns the run of a command made of subs: it runs the
// subcommand args[0] names with the arguments after it, and else other
// with all of args.
func subcommands(subs []subcommand, other runFunc) runFunc {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		if run, ok := findSub(subs, args); ok {
			return run(ctx, args[1:], stdout, stderr)
		}
		return other(ctx, args, stdout, stderr)
	}
}

// usageOnly is the run of a command that is only its subcommands, for
// arguments that name none of them: for -h, --help and help it prints
// usage to stdout, else usage to stderr and a usage error.
func usageOnly(usage string) runFunc {
	return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
		if len(args) == 0 {
			fmt.Fprintln(stderr, usage)
			return fmt.Errorf("%w: missing subcommand", errUsage)
		}
		switch args[0] {
		case "-h", "--help", "help":
			fmt.Fprintln(stdout, usage)
			return nil
		}
		fmt.Fprintln(stderr, usage)
		return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
	}
}

// errUsage marks an error caused by wrong command-line arguments.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one invocation of micra and returns its exit status:
// 0 on success, 1 on failure, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "micra: unknown command %q; run \"micra help\"\n", args[0])
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		// The "usage: " of errUsage says nothing to the person reading.
		fmt.Fprintf(stderr, "micra %s: %s\n", args[0], strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	default:
		fmt.Fprintf(stderr, "micra %s: %v\n", args[0], err)
		return 1
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "micra is a location-aware, peer-to-peer volunteer web crawler.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: micra <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run \"micra <command> -h\" for a command's arguments.")
}
