package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits checks the shipped systemd units with systemd-analyze:
// verify (syntax, every key known, the binary executable) and security
// (an exposure of at most 2.0 on its 0-10 scale, given as 20). This test
// binary stands in for /usr/local/bin/micra.
func TestSystemdUnits(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed (Debian package systemd); .ci/run installs it")
		}
		t.Skip("systemd-analyze is not installed (Debian package systemd)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	units, err := filepath.Glob("../../dist/systemd/*.service")
	if err != nil || len(units) != 2 {
		t.Fatalf("units: %v %v", units, err)
	}
	for _, u := range units {
		text, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(text), "/usr/local/bin/micra", self)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", path).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, out)
		}
		out, err = exec.Command(sa, "security", "--offline=true", "--threshold=20", path).CombinedOutput()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			t.Errorf("systemd-analyze security %s: %v: %s", filepath.Base(u), err, lines[len(lines)-1])
		}
	}
}

// TestUnitsRunMicra parses the units' ExecStart lines as micra would: the
// node's with the shipped example configuration, the indexer's flags.
func TestUnitsRunMicra(t *testing.T) {
	state := t.TempDir()
	for unit, want := range map[string]string{"micra-node.service": "node", "micra-indexer.service": "indexer"} {
		text, err := os.ReadFile(filepath.Join("../../dist/systemd", unit))
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		for _, line := range strings.Split(string(text), "\n") {
			if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
				cmd = strings.ReplaceAll(cmd, "${STATE_DIRECTORY}", state)
				cmd = strings.ReplaceAll(cmd, "/etc/micra/micra.toml", "../../dist/micra.toml")
				cmd = strings.ReplaceAll(cmd, "/etc/micra/indexer.toml", "../../dist/indexer.toml")
				args = strings.Fields(cmd)
			}
		}
		if len(args) < 2 || args[0] != "/usr/local/bin/micra" || args[1] != want {
			t.Fatalf("%s: ExecStart runs %q", unit, args)
		}
		switch want {
		case "node":
			cfg, err := nodeConfig(args[2:], nil, io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", unit, err)
			}
			if cfg.DataDir != state || cfg.DailyTransfer != "10GB" {
				t.Errorf("%s: data_dir %q, daily_transfer %q", unit, cfg.DataDir, cfg.DailyTransfer)
			}
		case "indexer":
			cfg, err := indexerConfig(args[2:], io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", unit, err)
			}
			if cfg.DataDir != state || cfg.HTTP != "127.0.0.1:7465" || len(cfg.Listen) != 2 {
				t.Errorf("%s: data dir %q, http %q, listen %q", unit, cfg.DataDir, cfg.HTTP, cfg.Listen)
			}
		}
	}
}
