package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigSources(t *testing.T) {
	path := filepath.Join(t.TempDir(), "micra.toml")
	os.WriteFile(path, []byte(`
data_dir = "/var/lib/micra"
capacity = 500
windows = ["mon-fri 00:00-06:00", "sat,sun 00:00-24:00"]
bandwidth = "2MiB"
allow_ports = [8080]
`), 0o644)
	c := DefaultConfig()
	if err := c.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	// The environment wins over the file.
	if err := c.LoadEnv([]string{"MICRA_CAPACITY=700", "MICRA_ALLOW_PRIVATE_NETWORKS=true", "MICRA_BOOTSTRAP=/ip4/127.0.0.1/tcp/1/p2p/x,/ip4/127.0.0.2/tcp/1/p2p/y", "MICRA_DATA=/elsewhere", "PATH=/bin"}); err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/var/lib/micra" || c.Capacity != 700 || !c.AllowPrivateNetworks || len(c.Bootstrap) != 2 || c.AllowPorts[0] != 8080 {
		t.Errorf("config %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ws, err := c.CrawlWindows()
	if err != nil || len(ws) != 7 {
		t.Fatalf("windows %v %v", ws, err)
	}
	if ws[0] != (crawl.Window{Day: time.Monday, Start: 0, End: 6 * time.Hour}) || ws[6].End != 24*time.Hour {
		t.Errorf("windows %v", ws)
	}
	if n, _ := ParseSize(c.Bandwidth); n != 2<<20 {
		t.Errorf("bandwidth %d", n)
	}
}

func TestConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(path, []byte("capacty = 5\n"), 0o644)
	c := DefaultConfig()
	if err := c.LoadFile(path); err == nil || !strings.Contains(err.Error(), "capacty") {
		t.Errorf("typo in a key: %v", err)
	}
	if err := c.LoadEnv([]string{"MICRA_CAPACITY=lots"}); err == nil || !strings.Contains(err.Error(), "MICRA_CAPACITY") {
		t.Errorf("bad env value: %v", err)
	}
	// Every problem is named, not only the first; the good keys apply.
	os.WriteFile(path, []byte("capacty = 5\nindexers = \"two\"\nlog_level = \"debug\"\nthreshhold = \"9ms\"\nallow_private_networks = 1\n"), 0o644)
	c = DefaultConfig()
	err := c.LoadFile(path)
	for _, want := range []string{
		path + `:1: unknown key "capacty" (did you mean "capacity"?)`,
		path + `:2: indexers: takes a whole number without quotes, like indexers = 1`,
		path + `:4: unknown key "threshhold" (did you mean "threshold"?)`,
		path + `:5: allow_private_networks: takes true or false`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("problem %s not named in %v", want, err)
		}
	}
	if c.LogLevel != "debug" {
		t.Errorf("a good key beside bad ones was not applied: log_level %q", c.LogLevel)
	}
	// A number where a size goes: the error says what the key takes.
	os.WriteFile(path, []byte("# sizes\n\nbandwidth = -100\n"), 0o644)
	if err := c.LoadFile(path); err == nil || err.Error() != path+`:3: bandwidth: takes text in quotes, like bandwidth = "1MiB"` {
		t.Errorf("bandwidth = -100: %v", err)
	}
	os.WriteFile(path, []byte("capacity = \n"), 0o644)
	if err := c.LoadFile(path); err == nil || !strings.HasPrefix(err.Error(), path+":1: ") {
		t.Errorf("syntax error without its line: %v", err)
	}
	err = c.LoadEnv([]string{"MICRA_CAPACITY=lots", "MICRA_INDEXERS=many"})
	for _, want := range []string{"MICRA_CAPACITY", "MICRA_INDEXERS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("env problem %s not named in %v", want, err)
		}
	}
	tests := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Capacity = 0 }, "capacity"},
		{func(c *Config) { c.Workers = 0 }, "workers must be 1 to 256"},
		{func(c *Config) { c.Workers = 1000 }, "workers must be 1 to 256"},
		{func(c *Config) { c.DiskCap = "lots" }, "disk_cap"},
		{func(c *Config) { c.Windows = []string{"funday 00:00-01:00"} }, "unknown day"},
		{func(c *Config) { c.Windows = []string{"mon 06:00-01:00"} }, "time span"},
		{func(c *Config) { c.Windows = []string{"mon"} }, "DAYS"},
		{func(c *Config) { c.Bandwidth = "fast" }, "bandwidth"},
		{func(c *Config) { c.SourceAddr = "nowhere" }, "source_addr"},
		{func(c *Config) { c.LogLevel = "loud" }, "log_level"},
		{func(c *Config) { c.Dashboard = "0.0.0.0:7464" }, "dashboard_token"},
		{func(c *Config) { c.Indexers = 0 }, "indexers"},
		{func(c *Config) { c.Liveness = "1s" }, "liveness"},
		{func(c *Config) { c.Liveness = "soon" }, "liveness"},
		{func(c *Config) { c.BatchWait = "0s" }, "batch_wait"},
		{func(c *Config) { c.WithholdGrace = "0s" }, "withhold_grace"},
		{func(c *Config) { c.WithholdGrace = "2d" }, "withhold_grace"},
		{func(c *Config) { c.SnapshotKeys = []string{"ed25519:short"} }, "snapshot_keys"},
		{func(c *Config) { c.SnapshotKeys = []string{"rsa:AAAA"} }, "snapshot_keys"},
		{func(c *Config) { c.Relays = []string{"/ip4/203.0.113.7/tcp/4001"} }, "relays"},
		{func(c *Config) { c.Relays = []string{"relay.example"} }, "relays"},
	}
	for _, tc := range tests {
		c := DefaultConfig()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error about %s, got %v", tc.want, err)
		}
	}
	c = DefaultConfig()
	c.Relays = []string{"/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWKYzCNUYadyqNe4mezTUKYQqgErTmFwPi7S5vhJ8GJ7KT"}
	if err := c.Validate(); err != nil {
		t.Errorf("a relay: %v", err)
	}
	c = DefaultConfig()
	c.Dashboard, c.DashboardToken = "0.0.0.0:7464", "0123456789abcdef"
	if err := c.Validate(); err != nil {
		t.Errorf("dashboard with token: %v", err)
	}
	c.Windows = []string{"fri-mon 22:00-24:00", "daily 03:00-04:30"}
	if ws, err := c.CrawlWindows(); err != nil || len(ws) != 4+7 {
		t.Errorf("wrapping day range: %v %v", ws, err)
	}
}

// TestDefaultDataDir: node and indexer keep their data side by side under
// the XDG data folder; a node whose data is in the old default (the
// configuration folder) keeps it there until the new one exists.
func TestDefaultDataDir(t *testing.T) {
	data, cfg := t.TempDir(), t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	t.Setenv("XDG_CONFIG_HOME", cfg)
	if got := DefaultDataDir("indexer"); got != filepath.Join(data, "micra", "indexer") {
		t.Errorf("indexer: %s", got)
	}
	if got := DefaultDataDir("node"); got != filepath.Join(data, "micra", "node") {
		t.Errorf("node: %s", got)
	}
	old := filepath.Join(cfg, "micra")
	os.MkdirAll(old, 0o700)
	os.WriteFile(filepath.Join(old, "identity.key"), []byte("k"), 0o600)
	if got := DefaultDataDir("node"); got != old {
		t.Errorf("node with data in the old default: %s", got)
	}
	os.MkdirAll(filepath.Join(data, "micra", "node"), 0o700)
	if got := DefaultDataDir("node"); got != filepath.Join(data, "micra", "node") {
		t.Errorf("node with both: %s", got)
	}
}
