package bootstrap

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// EnvVar is the environment variable read by FromEnv: bootstrap multiaddrs
// separated by commas or white space.
const EnvVar = "MICRA_BOOTSTRAP"

const (
	// MaxEntries bounds the number of entries one source may list. A
	// bootstrap list needs a handful of peers; thousands are a mistake or an
	// attack on the dialler.
	MaxEntries = 1024

	// MaxFileSize bounds a bootstrap file in bytes (1024 entries of about
	// 100 bytes fit many times over).
	MaxFileSize = 1 << 20

	// maxEntryLen bounds one multiaddr in bytes; real ones are under 200.
	maxEntryLen = 1024

	// maxAddrsPerPeer bounds the addresses kept for one peer after merging.
	maxAddrsPerPeer = 32
)

//go:embed defaults.txt
var defaultList string

// Defaults returns the embedded default bootstrap peers. The list is empty
// until a public micra network exists (see defaults.txt); an empty result is
// not an error here, but Join refuses an empty list with ErrNoPeers.
func Defaults() []peer.AddrInfo {
	ps, err := Parse("defaults.txt", strings.NewReader(defaultList))
	if err != nil {
		// The embedded list is checked by TestDefaults; a broken build is a
		// programming error.
		panic(fmt.Sprintf("bootstrap: embedded defaults: %v", err))
	}
	return ps
}

// ParseList parses bootstrap multiaddrs separated by commas or white space,
// as given in a flag, a configuration value or the environment. source names
// the origin in errors. An empty string yields no peers and no error.
func ParseList(source, s string) ([]peer.AddrInfo, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	if len(fields) > MaxEntries {
		return nil, fmt.Errorf("%s: %w: %d entries, at most %d", source, ErrTooLarge, len(fields), MaxEntries)
	}
	var addrs []ma.Multiaddr
	for i, f := range fields {
		a, err := parseEntry(f)
		if err != nil {
			return nil, fmt.Errorf("%s: entry %d %q: %w", source, i+1, clip(f), err)
		}
		addrs = append(addrs, a)
	}
	return group(addrs), nil
}

// Parse reads a bootstrap list: one multiaddr per line; blank lines and
// lines starting with '#' are ignored. name is used in errors, which give the
// line number. The input is bounded by MaxFileSize and MaxEntries.
func Parse(name string, r io.Reader) ([]peer.AddrInfo, error) {
	lr := &io.LimitedReader{R: r, N: MaxFileSize + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), maxEntryLen+2)
	var addrs []ma.Multiaddr
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		if len(addrs) >= MaxEntries {
			return nil, fmt.Errorf("%s:%d: %w: more than %d entries", name, line, ErrTooLarge, MaxEntries)
		}
		a, err := parseEntry(s)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", name, line, clip(s), err)
		}
		addrs = append(addrs, a)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: %w: line longer than %d bytes", name, line+1, ErrBadAddr, maxEntryLen)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", name, ErrTooLarge, MaxFileSize)
	}
	return group(addrs), nil
}

// LoadFile reads a bootstrap list from the file at path; see Parse.
func LoadFile(path string) ([]peer.AddrInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening bootstrap file: %w", err)
	}
	defer f.Close()
	return Parse(path, f)
}

// FromEnv parses the peers listed in the EnvVar environment variable; see
// ParseList. An unset or empty variable yields no peers and no error.
func FromEnv() ([]peer.AddrInfo, error) {
	return ParseList(EnvVar, os.Getenv(EnvVar))
}

// Merge combines peer lists, keeping the first occurrence's order and the
// union of each peer's addresses (at most 32 per peer).
func Merge(lists ...[]peer.AddrInfo) []peer.AddrInfo {
	var out []peer.AddrInfo
	idx := map[peer.ID]int{}
	for _, l := range lists {
		for _, p := range l {
			i, ok := idx[p.ID]
			if !ok {
				i = len(out)
				idx[p.ID] = i
				out = append(out, peer.AddrInfo{ID: p.ID})
			}
			for _, a := range p.Addrs {
				out[i].Addrs = appendAddr(out[i].Addrs, a)
			}
		}
	}
	return out
}

// Addrs returns h's listen addresses with its /p2p/ id appended, in the form
// the parsers accept: what a node with a stable address publishes so that
// others can use it as a bootstrap peer.
func Addrs(h host.Host) []ma.Multiaddr {
	addrs, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()})
	if err != nil {
		return nil
	}
	return addrs
}

// parseEntry parses one multiaddr and checks it names a peer and a way to
// reach it.
func parseEntry(s string) (ma.Multiaddr, error) {
	if len(s) > maxEntryLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadAddr, maxEntryLen)
	}
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAddr, err)
	}
	transport, id := peer.SplitAddr(a)
	if id == "" {
		return nil, fmt.Errorf("%w: no /p2p/<peer id> at the end", ErrBadAddr)
	}
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("%w: peer id: %v", ErrBadAddr, err)
	}
	if len(transport) == 0 {
		return nil, fmt.Errorf("%w: only a peer id, no address to dial", ErrBadAddr)
	}
	return a, nil
}

// group turns parsed addresses into one AddrInfo per peer, in order of first
// appearance.
func group(addrs []ma.Multiaddr) []peer.AddrInfo {
	var out []peer.AddrInfo
	idx := map[peer.ID]int{}
	for _, a := range addrs {
		transport, id := peer.SplitAddr(a)
		i, ok := idx[id]
		if !ok {
			i = len(out)
			idx[id] = i
			out = append(out, peer.AddrInfo{ID: id})
		}
		out[i].Addrs = appendAddr(out[i].Addrs, transport)
	}
	return out
}

func appendAddr(addrs []ma.Multiaddr, a ma.Multiaddr) []ma.Multiaddr {
	if len(addrs) >= maxAddrsPerPeer {
		return addrs
	}
	for _, b := range addrs {
		if b.Equal(a) {
			return addrs
		}
	}
	return append(addrs, a)
}

// clip shortens s for error messages.
func clip(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
