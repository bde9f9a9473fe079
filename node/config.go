package node

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/bootstrap"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/subnet"
)

// Config is a volunteer node's configuration. Start from DefaultConfig; the
// command line fills it from a TOML file, MICRA_* environment variables and
// flags, in that order of increasing precedence. Sizes are written with
// units ("2MiB", "10GB"); times of day as "HH:MM".
type Config struct {
	// DataDir holds the node's badger database and identity key.
	DataDir string `toml:"data_dir"`
	// Listen are the libp2p listen multiaddrs.
	Listen []string `toml:"listen"`
	// Bootstrap are bootstrap peers: multiaddrs ending in /p2p/<peer id>.
	Bootstrap []string `toml:"bootstrap"`
	// BootstrapFile lists more bootstrap peers, one multiaddr per line
	// (# starts a comment).
	BootstrapFile string `toml:"bootstrap_file"`
	// Relays are circuit relays a node behind NAT reserves slots on:
	// multiaddrs ending in /p2p/<peer id>. None: relays are chosen among
	// connected peers that offer the relay service (docs/nat.md).
	Relays []string `toml:"relays"`
	// SourceAddr binds outgoing crawl and probe connections to this local
	// address ("" lets the system choose), as a multi-homed host or the
	// emulated Internet needs.
	SourceAddr string `toml:"source_addr"`
	// Capacity is the pages per day this node offers to crawl; the
	// coordinators balance delegations by it.
	Capacity int `toml:"capacity"`
	// Windows are the times when crawling and probing may happen, e.g.
	// "mon-fri 00:00-06:00" and "sat,sun 00:00-24:00"; none means always.
	Windows []string `toml:"windows"`
	// Timezone of the windows (IANA name; "" for the system's).
	Timezone string `toml:"timezone"`
	// Bandwidth caps the crawler's download rate per second ("" or "0":
	// no cap); DailyTransfer caps its bytes per day.
	Bandwidth     string `toml:"bandwidth"`
	DailyTransfer string `toml:"daily_transfer"`
	// AllowPrivateNetworks lets the crawler fetch private, loopback and
	// other special-purpose addresses, and the node take seeds and crawl
	// requests for them and delegate, resolve and probe them; off for
	// volunteers (all of it is refused with an error naming the address),
	// on for the emulated Internet and the demo. AllowPorts adds ports to
	// 80 and 443 (none with AllowPrivateNetworks means every port).
	AllowPrivateNetworks bool     `toml:"allow_private_networks"`
	AllowPorts           []uint16 `toml:"allow_ports"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// Dashboard is the address of the local dashboard and API; on any
	// address but loopback, DashboardToken is required.
	Dashboard      string `toml:"dashboard"`
	DashboardToken string `toml:"dashboard_token"`
	// Indexers is how many designated indexers must acknowledge a result
	// batch before it leaves the outbox.
	Indexers int `toml:"indexers"`
	// OutboxCap bounds the outbox; when full, crawling pauses.
	OutboxCap string `toml:"outbox_cap"`
	// DiskCap bounds the data directory (the database: frontier, outbox,
	// delegations; snapshots; the identity), measured every 10 s in
	// blocks allocated: at the cap crawling pauses and the node promises
	// no crawl requests, nothing is dropped, and it resumes below 95 % of
	// it. "" or "0" for none.
	DiskCap string `toml:"disk_cap"`
	// Workers is how many pages are fetched at once; parsing them runs on
	// at most as many of the process's CPUs (GOMAXPROCS, which Go sets
	// from the CPU quota of the service).
	Workers int `toml:"workers"`
	// MemoryLimit is the soft memory limit of the process (runtime
	// SetMemoryLimit); "" or "0" for none.
	MemoryLimit string `toml:"memory_limit"`
	// Snapshot is a subnet snapshot file ("micra subnet import" writes
	// one); "" uses the snapshot built into micra. Every node of a network
	// must use the same snapshot.
	Snapshot string `toml:"snapshot"`
	// SnapshotKeys are the public keys ("ed25519:BASE64", as "micra subnet
	// keygen" prints them) whose signed snapshot releases this node takes,
	// fetches, keeps (in data_dir/snapshots, at most two) and serves to
	// its peers. None: releases are refused.
	SnapshotKeys []string `toml:"snapshot_keys"`
	// DNS is the address:port of the DNS server the crawler and the probes
	// use; "" uses the system's resolver.
	DNS string `toml:"dns"`
	// Threshold is IPMicra's probing threshold ("50ms"): a node that
	// answers a probe under it is delegated the subnet without asking
	// further nodes.
	Threshold string `toml:"threshold"`
	// ResultShards is the number of result topics, network-wide (all nodes
	// and indexers must agree).
	ResultShards int `toml:"result_shards"`
	// Liveness is the silence after which coordinators orphan a crawler's
	// subnets and re-delegate them; crawlers send heartbeats every tenth
	// of it, and coordinators check at least every quarter of it. All
	// nodes of a network should agree. Shorter than the default only for
	// tests and small private networks: heartbeats cost traffic.
	Liveness string `toml:"liveness"`
	// BatchWait is the longest a batch of crawl results stays open before
	// it is sealed into the outbox (and a batch of URLs for other nodes
	// before it is forwarded, at most 30 s). Shorter batches reach
	// indexers sooner and cost more signatures and messages.
	BatchWait string `toml:"batch_wait"`
	// WithholdGrace is how long a coordinator waits, after an indexer's
	// first notice that a node left its crawl request unanswered, before
	// it judges the next one and may take the node's subnet back
	// (overlay.WithholdConfig). It should be well under the indexers'
	// crawl patience (30 min): they send the notice again after it.
	WithholdGrace string `toml:"withhold_grace"`
}

// DefaultConfig returns safe defaults for a volunteer.
func DefaultConfig() Config {
	return Config{
		DataDir:      defaultDataDir(),
		Listen:       []string{"/ip4/0.0.0.0/tcp/7466", "/ip4/0.0.0.0/udp/7466/quic-v1"},
		Capacity:     10_000, // pages per day: a light load for a home line
		LogLevel:     "info", //
		Dashboard:    "127.0.0.1:7464",
		Indexers:     1,        // one acknowledgement: results are stored once before leaving
		OutboxCap:    "512MiB", // about 2000 full batches
		DiskCap:      "10GiB",  // the outbox cap, and a frontier of 10 million URLs (about 3 GiB) three times over
		Workers:      16,       // fetches wait on servers far more than on the CPU
		Bandwidth:    "1MiB",   // per second
		Timezone:     "",       // the system's
		MemoryLimit:  "100MiB", // soft; crawling at 1 MiB/s, the heap in use stays under 80 MB with it, 120 MB without (docs/performance.md, Footprint)
		Threshold:    "50ms",   // the paper's best ratio of quality to probes
		ResultShards: 1,
		Liveness:     "5m", // ten missed heartbeats of 30 s
		BatchWait:    "5m", // batches of 256 KiB of records usually fill sooner

		WithholdGrace: "10m", // a third of the indexers' patience: time for a queued request to come up
	}
}

func defaultDataDir() string { return DefaultDataDir("node") }

// DefaultDataDir is where a role ("node" or "indexer") keeps its data by
// default: micra/ROLE under $XDG_DATA_HOME (~/.local/share), the same
// layout for both (identity.key and db/ inside). A node set up when its
// default was the user's configuration folder (~/.config/micra) keeps
// using that one while the new one does not exist.
func DefaultDataDir(role string) string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(".micra", role)
		}
		base = filepath.Join(home, ".local", "share")
	}
	dir := filepath.Join(base, "micra", role)
	if role == "node" {
		if cfg, err := os.UserConfigDir(); err == nil {
			old := filepath.Join(cfg, "micra")
			if _, err := os.Stat(filepath.Join(old, "identity.key")); err == nil {
				if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
					return old
				}
			}
		}
	}
	return dir
}

// EnvPrefix is the prefix of the environment variables that configure a
// node: MICRA_ followed by a TOML key in upper case (MICRA_DATA_DIR,
// MICRA_CAPACITY). Lists are comma-separated.
const EnvPrefix = "MICRA_"

// LoadEnv applies MICRA_* variables from environ (os.Environ's form).
// Variables that name no key are ignored, since other programs share the
// prefix (MICRA_DATA, MICRA_BOOTSTRAP are read elsewhere); every malformed
// value is an error naming the variable.
func (c *Config) LoadEnv(environ []string) error {
	var errs []error
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
		if err := c.Set(key, val); err != nil && !errors.Is(err, errUnknownKey) {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

var errUnknownKey = errors.New("unknown configuration key")

// Set sets the field of TOML key to a value written as in the environment
// and on the command line: lists are separated by commas, or by
// semicolons when the value has any (windows contain commas:
// "mon-fri 00:00-06:00;sat,sun 00:00-24:00").
func (c *Config) Set(key, value string) error {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("toml") == key {
			return setField(v.Field(i), value)
		}
	}
	return fmt.Errorf("%w %q", errUnknownKey, key)
}

// Keys returns the TOML keys of Config, in declaration order.
func Keys() []string {
	t := reflect.TypeFor[Config]()
	out := make([]string, t.NumField())
	for i := range out {
		out[i] = t.Field(i).Tag.Get("toml")
	}
	return out
}

func setField(f reflect.Value, s string) error {
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not true or false", s)
		}
		f.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		f.SetInt(int64(n))
	case reflect.Slice:
		var parts []string
		sep := ","
		if strings.Contains(s, ";") {
			sep = ";"
		}
		for _, p := range strings.Split(s, sep) {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		out := reflect.MakeSlice(f.Type(), len(parts), len(parts))
		for i, p := range parts {
			if err := setField(out.Index(i), p); err != nil {
				return err
			}
		}
		f.Set(out)
	case reflect.Uint16:
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return fmt.Errorf("%q is not a port", s)
		}
		f.SetUint(n)
	default:
		return fmt.Errorf("unsupported kind %s", f.Kind())
	}
	return nil
}

// settings are a Config's values in the types the parts take. parse
// checks every field and fills them once; New builds the node from them
// and reads none of the Config's strings again.
type settings struct {
	level       slog.Level
	listen      []ma.Multiaddr
	relays      []peer.AddrInfo
	source      netip.Addr     // SourceAddr; invalid for none
	dns         netip.AddrPort // DNS; invalid for the system's resolver
	loc         *time.Location
	windows     []crawl.Window
	releaseKeys []ed25519.PublicKey

	bandwidth, dailyTransfer, outboxCap, diskCap, memoryLimit int64

	threshold, liveness, withholdGrace, batchWait time.Duration
}

// Bounds of the durations a peer takes. Liveness and WithholdGrace bound
// the same settings of a node (Config) and of an indexer (IndexerConfig).
var (
	thresholdRange = durationRange{time.Nanosecond, 10 * time.Second, "between 0 and 10s, like 50ms"}
	livenessRange  = durationRange{2 * time.Second, 24 * time.Hour, "between 2s and 24h, like 5m"}
	graceRange     = durationRange{time.Second, 24 * time.Hour, "between 1s and 24h, like 10m"}
	batchWaitRange = durationRange{time.Second, time.Hour, "between 1s and 1h, like 5m"}
)

// durationRange is the bounds of a duration setting; text says them.
type durationRange struct {
	min, max time.Duration
	text     string
}

// parse parses s, the value of setting key, as a duration within r.
func (r durationRange) parse(key, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < r.min || d > r.max {
		return 0, &SettingError{Key: key, Err: fmt.Errorf("%q is not a duration %s", s, r.text)}
	}
	return d, nil
}

// check checks d, the value of setting key, against r.
func (r durationRange) check(key string, d time.Duration) error {
	if d < r.min || d > r.max {
		return &SettingError{Key: key, Err: fmt.Errorf("%v is not a duration %s", d, r.text)}
	}
	return nil
}

// A SettingError is a setting whose value does not parse or is out of its
// bounds. Key is the setting's key in the configuration file (the flag
// with - for _).
type SettingError struct {
	Key string
	Err error
}

func (e *SettingError) Error() string { return e.Key + " " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Validate checks every field and returns all the problems found.
func (c *Config) Validate() error {
	_, err := c.parse()
	return err
}

// parse checks every field, as Validate, and returns the values parsed.
func (c *Config) parse() (settings, error) {
	var s settings
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.DataDir == "" {
		bad("data_dir is empty")
	}
	if c.Capacity <= 0 {
		bad("capacity must be positive pages per day, got %d", c.Capacity)
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		bad("workers must be 1 to %d, got %d", maxWorkers, c.Workers)
	}
	var err error
	s.windows, err = c.CrawlWindows()
	add(err)
	for _, size := range []struct {
		name, value string
		to          *int64
	}{
		{"bandwidth", c.Bandwidth, &s.bandwidth}, {"daily_transfer", c.DailyTransfer, &s.dailyTransfer},
		{"outbox_cap", c.OutboxCap, &s.outboxCap}, {"disk_cap", c.DiskCap, &s.diskCap}, {"memory_limit", c.MemoryLimit, &s.memoryLimit},
	} {
		if *size.to, err = ParseSize(size.value); err != nil {
			bad("%s: %v", size.name, err)
		}
	}
	if c.SourceAddr != "" {
		if s.source, err = netip.ParseAddr(c.SourceAddr); err != nil {
			bad("source_addr %q is not an IP address", c.SourceAddr)
		}
	}
	if s.level, err = ParseLogLevel(c.LogLevel); err != nil {
		bad("log_level %v", err)
	}
	if c.Dashboard != "" {
		ap, err := netip.ParseAddrPort(c.Dashboard)
		switch {
		case err != nil:
			bad("dashboard %q is not an address:port", c.Dashboard)
		case !ap.Addr().IsLoopback() && len(c.DashboardToken) < 16:
			bad("dashboard on %s, not loopback: dashboard_token of at least 16 characters required", ap.Addr())
		}
	}
	s.threshold, err = thresholdRange.parse("threshold", c.Threshold)
	add(err)
	s.loc, err = c.location()
	add(err)
	if c.DNS != "" {
		if s.dns, err = netip.ParseAddrPort(c.DNS); err != nil {
			bad("dns %q is not an address:port like 127.0.0.53:53", c.DNS)
		}
	}
	s.releaseKeys, err = parseReleaseKeys("snapshot_keys", c.SnapshotKeys)
	add(err)
	s.relays, err = bootstrap.ParseList("relays", strings.Join(c.Relays, ","))
	add(err)
	if c.ResultShards < 1 || c.ResultShards > 1024 {
		bad("result_shards must be 1 to 1024, got %d", c.ResultShards)
	}
	if len(c.Listen) == 0 {
		bad("listen is empty: a node needs at least one listen address")
	}
	s.listen, err = ParseListen(c.Listen)
	add(err)
	if c.Indexers < 1 || c.Indexers > 16 {
		bad("indexers must be 1 to 16, got %d", c.Indexers)
	}
	s.liveness, err = livenessRange.parse("liveness", c.Liveness)
	add(err)
	s.withholdGrace, err = graceRange.parse("withhold_grace", c.WithholdGrace)
	add(err)
	s.batchWait, err = batchWaitRange.parse("batch_wait", c.BatchWait)
	add(err)
	return s, errors.Join(errs...)
}

// ParseLogLevel parses a log level: debug, info, warn or error.
func ParseLogLevel(s string) (slog.Level, error) {
	var level slog.Level
	switch s {
	case "debug", "info", "warn", "error":
		return level, level.UnmarshalText([]byte(s))
	}
	return level, fmt.Errorf("%q is not debug, info, warn or error", s)
}

// parseReleaseKeys parses release keys ("ed25519:BASE64"), naming key in
// each problem.
func parseReleaseKeys(key string, ss []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	var errs []error
	for _, s := range ss {
		k, err := subnet.ParseReleaseKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		keys = append(keys, k)
	}
	return keys, errors.Join(errs...)
}

// ParseListen parses libp2p listen multiaddrs, naming the first bad one.
func ParseListen(addrs []string) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", s, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// ParseSize parses a byte size such as "2MiB", "10GB" or "4096"; "" and
// "0" are zero.
func ParseSize(s string) (int64, error) {
	if s == "" || s == "0" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > 1<<62 {
		return 0, fmt.Errorf("%q is not a size like 2MiB or 10GB", s)
	}
	return int64(n), nil
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// CrawlWindows parses Windows into the crawler's form. Each entry is
// "DAYS HH:MM-HH:MM" where DAYS is a comma-separated list of days or day
// ranges (mon-fri, sat,sun, daily); a window may end at 24:00.
func (c *Config) CrawlWindows() ([]crawl.Window, error) {
	var out []crawl.Window
	for _, spec := range c.Windows {
		days, span, ok := strings.Cut(strings.TrimSpace(spec), " ")
		if !ok {
			return nil, fmt.Errorf("window %q: want \"DAYS HH:MM-HH:MM\"", spec)
		}
		from, to, ok := strings.Cut(strings.TrimSpace(span), "-")
		start, err1 := clock(from)
		end, err2 := clock(to)
		if !ok || err1 != nil || err2 != nil || start >= end {
			return nil, fmt.Errorf("window %q: want a time span like 00:00-06:00", spec)
		}
		var ds []time.Weekday
		for _, part := range strings.Split(strings.ToLower(days), ",") {
			part = strings.TrimSpace(part)
			if part == "daily" {
				for d := time.Sunday; d <= time.Saturday; d++ {
					ds = append(ds, d)
				}
				continue
			}
			a, b, isRange := strings.Cut(part, "-")
			da, okA := weekdays[a]
			db := da
			okB := true
			if isRange {
				db, okB = weekdays[b]
			}
			if !okA || !okB {
				return nil, fmt.Errorf("window %q: unknown day %q (mon, tue, ..., sun, daily)", spec, part)
			}
			for d := da; ; d = (d + 1) % 7 {
				ds = append(ds, d)
				if d == db {
					break
				}
			}
		}
		for _, d := range ds {
			out = append(out, crawl.Window{Day: d, Start: start, End: end})
		}
	}
	return out, nil
}

func clock(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

// location returns the time zone of the windows.
func (c *Config) location() (*time.Location, error) {
	if c.Timezone == "" {
		return time.Local, nil
	}
	loc, err := time.LoadLocation(c.Timezone)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not an IANA time zone like Europe/Nicosia", c.Timezone)
	}
	return loc, nil
}
