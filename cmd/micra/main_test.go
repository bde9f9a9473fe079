package main

import (
	"strings"
	"testing"
)

// TestSubcommandUsage: a command made of subcommands answers a missing,
// an unknown and a help argument with its usage, on the stream and with
// the exit status each asks for.
func TestSubcommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		code               int
		stdout, stderr     string // contained
		noStdout, noStderr bool
	}{
		{args: []string{"subnet"}, code: 2, stderr: "missing subcommand", noStdout: true},
		{args: []string{"subnet", "nope"}, code: 2, stderr: `unknown subcommand "nope"`, noStdout: true},
		{args: []string{"subnet", "help"}, code: 0, stdout: "Usage: micra subnet <command>", noStderr: true},
		{args: []string{"world", "--help"}, code: 0, stdout: "Usage: micra world <command>", noStderr: true},
		{args: []string{"world", "-x"}, code: 2, stderr: "Usage: micra world <command>", noStdout: true},
		{args: []string{"bench"}, code: 2,
			stderr: "Usage: micra bench delegation|structure|crawl|overlay|footprint|liars|search [flags]   (run with -h for the flags)\n" +
				"micra bench: want a benchmark name: delegation, structure, crawl, overlay, footprint, liars or search\n", noStdout: true},
		{args: []string{"bench", "-h"}, code: 0, stderr: "Usage: micra bench delegation|", noStdout: true},
		{args: []string{"indexer", "help"}, code: 0, stderr: "Usage: micra indexer [flags]", noStdout: true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errs, tc.stderr) ||
				(tc.noStdout && out != "") || (tc.noStderr && errs != "") {
				t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
		})
	}
}
