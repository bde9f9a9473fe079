package node

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfigFile feeds arbitrary bytes to the configuration file loader
// and then to everything that interprets its values (the fuzzing
// inventory: config files are untrusted text a volunteer may have edited
// by hand). Nothing may panic.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("capacity = 10000\nbandwidth = \"1MiB\"\nwindows = [\"22:00-06:00\"]\ntimezone = \"Europe/Paris\"\n"))
	f.Add([]byte("listen = [\"/ip4/0.0.0.0/tcp/4001\"]\nbootstrap = []\n"))
	f.Add([]byte("[x]\ny = 1\n"))
	f.Add([]byte("windows = [\"25:61-00:00\", \"\"]\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "micra.toml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c := DefaultConfig()
		if c.LoadFile(path) != nil {
			return
		}
		_ = c.Validate()
		_, _ = c.CrawlWindows()
		_, _ = ParseSize(c.Bandwidth)
	})
}
