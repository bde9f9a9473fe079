package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/internal/p2ptest"
)

func newID(t testing.TB) peer.ID {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestParseList(t *testing.T) {
	a, b := newID(t), newID(t)
	tests := []struct {
		name    string
		in      string
		want    map[peer.ID]int // peer → number of addresses
		wantErr error
	}{
		{"empty", "", nil, nil},
		{"blank", " ,\t\n", nil, nil},
		{"one", "/ip4/127.0.0.1/tcp/4001/p2p/" + a.String(), map[peer.ID]int{a: 1}, nil},
		{"commas and spaces", "/ip4/127.0.0.1/tcp/1/p2p/" + a.String() + ", /ip4/127.0.0.1/udp/1/quic-v1/p2p/" + a.String() + " /ip4/127.0.0.2/tcp/2/p2p/" + b.String(), map[peer.ID]int{a: 2, b: 1}, nil},
		{"duplicate address kept once", "/ip4/127.0.0.1/tcp/1/p2p/" + a.String() + ",/ip4/127.0.0.1/tcp/1/p2p/" + a.String(), map[peer.ID]int{a: 1}, nil},
		{"dns", "/dns4/boot.example/tcp/4001/p2p/" + a.String(), map[peer.ID]int{a: 1}, nil},
		{"no peer id", "/ip4/127.0.0.1/tcp/4001", nil, ErrBadAddr},
		{"only peer id", "/p2p/" + a.String(), nil, ErrBadAddr},
		{"not a multiaddr", "127.0.0.1:4001", nil, ErrBadAddr},
		{"bad peer id", "/ip4/127.0.0.1/tcp/4001/p2p/QmNotAPeer", nil, ErrBadAddr},
		{"one bad among good", "/ip4/127.0.0.1/tcp/1/p2p/" + a.String() + ",/ip4/1.2.3.4", nil, ErrBadAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseList("flag", tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if !strings.HasPrefix(err.Error(), "flag: entry ") {
					t.Errorf("error %q does not name its source and entry", err)
				}
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d peers, want %d: %v", len(got), len(tt.want), got)
			}
			for _, p := range got {
				if n, ok := tt.want[p.ID]; !ok || n != len(p.Addrs) {
					t.Errorf("peer %s has %d addrs, want %d (known %v)", p.ID, len(p.Addrs), n, ok)
				}
				for _, a := range p.Addrs {
					if _, id := peer.SplitAddr(a); id != "" {
						t.Errorf("address %s still carries /p2p/", a)
					}
				}
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	a := newID(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	content := "# comment\n\n  /ip4/127.0.0.1/tcp/4001/p2p/" + a.String() + "  \n# trailing\n"
	if err := os.WriteFile(good, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadFile(good)
	if err != nil || len(ps) != 1 || ps[0].ID != a {
		t.Fatalf("LoadFile = %v, %v", ps, err)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("# c\n/ip4/127.0.0.1/tcp/4001/p2p/"+a.String()+"\n/ip4/127.0.0.1/tcp/1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFile(bad)
	if !errors.Is(err, ErrBadAddr) || !strings.Contains(err.Error(), bad+":3:") {
		t.Fatalf("LoadFile(bad) = %v, want ErrBadAddr naming line 3", err)
	}

	if _, err := LoadFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("LoadFile of a missing file succeeded")
	}

	many := strings.Repeat("/ip4/127.0.0.1/tcp/4001/p2p/"+a.String()+"\n", MaxEntries+1)
	if _, err := Parse("many", strings.NewReader(many)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Parse of %d entries = %v, want ErrTooLarge", MaxEntries+1, err)
	}
	huge := strings.Repeat("#"+strings.Repeat("x", 1000)+"\n", MaxFileSize/1000+2)
	if _, err := Parse("huge", strings.NewReader(huge)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Parse of a huge file = %v, want ErrTooLarge", err)
	}
	long := "/ip4/127.0.0.1/tcp/1/p2p/" + strings.Repeat("x", 2*maxEntryLen)
	if _, err := Parse("long", strings.NewReader(long)); !errors.Is(err, ErrBadAddr) {
		t.Fatalf("Parse of a long line = %v, want ErrBadAddr", err)
	}
}

func TestFromEnv(t *testing.T) {
	a, b := newID(t), newID(t)
	t.Setenv(EnvVar, "/ip4/127.0.0.1/tcp/1/p2p/"+a.String()+",/ip4/127.0.0.1/tcp/2/p2p/"+b.String())
	ps, err := FromEnv()
	if err != nil || len(ps) != 2 || ps[0].ID != a || ps[1].ID != b {
		t.Fatalf("FromEnv = %v, %v", ps, err)
	}
	t.Setenv(EnvVar, "")
	if ps, err := FromEnv(); err != nil || len(ps) != 0 {
		t.Fatalf("FromEnv with empty variable = %v, %v", ps, err)
	}
	t.Setenv(EnvVar, "garbage")
	if _, err := FromEnv(); !errors.Is(err, ErrBadAddr) || !strings.Contains(err.Error(), EnvVar) {
		t.Fatalf("FromEnv with garbage = %v", err)
	}
}

func TestDefaults(t *testing.T) {
	// The embedded list must parse; it may be empty (documented).
	for _, p := range Defaults() {
		if len(p.Addrs) == 0 {
			t.Errorf("default peer %s has no address", p.ID)
		}
	}
}

func TestMerge(t *testing.T) {
	a, b := newID(t), newID(t)
	m1 := ma.StringCast("/ip4/127.0.0.1/tcp/1")
	m2 := ma.StringCast("/ip4/127.0.0.1/tcp/2")
	got := Merge(
		[]peer.AddrInfo{{ID: a, Addrs: []ma.Multiaddr{m1}}},
		[]peer.AddrInfo{{ID: b, Addrs: []ma.Multiaddr{m2}}, {ID: a, Addrs: []ma.Multiaddr{m1, m2}}},
	)
	if len(got) != 2 || got[0].ID != a || got[1].ID != b || len(got[0].Addrs) != 2 || len(got[1].Addrs) != 1 {
		t.Fatalf("Merge = %v", got)
	}
}

// fakeDialer fails each peer's first failures[id] dials.
type fakeDialer struct {
	mu       sync.Mutex
	failures map[peer.ID]int
	calls    map[peer.ID]int
}

func (f *fakeDialer) Connect(ctx context.Context, pi peer.AddrInfo) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[pi.ID]++
	if f.calls[pi.ID] <= f.failures[pi.ID] {
		return fmt.Errorf("connection refused (fake, attempt %d)", f.calls[pi.ID])
	}
	return nil
}

func infos(ids ...peer.ID) []peer.AddrInfo {
	var out []peer.AddrInfo
	for _, id := range ids {
		out = append(out, peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/9")}})
	}
	return out
}

func TestJoinBackoff(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		self, a, b := newID(t), newID(t), newID(t)
		d := &fakeDialer{failures: map[peer.ID]int{a: 2, b: 100}, calls: map[peer.ID]int{}}
		start := time.Now()
		got, err := Join(t.Context(), d, self, infos(self, a, b), Attempts(4), Backoff(time.Second, 4*time.Second))
		if err != nil || len(got) != 1 || got[0] != a {
			t.Fatalf("Join = %v, %v", got, err)
		}
		if d.calls[self] != 0 {
			t.Errorf("Join dialled itself")
		}
		if d.calls[a] != 3 {
			t.Errorf("a dialled %d times, want 3", d.calls[a])
		}
		if d.calls[b] != 4 {
			t.Errorf("b dialled %d times, want 4 (all attempts)", d.calls[b])
		}
		// Virtual time: 1+2+4 s of backoff with at most 25 % jitter for b.
		if el := time.Since(start); el < 7*time.Second || el > 9*time.Second {
			t.Errorf("virtual time %v, want between 7 s and 9 s of backoff", el)
		}
	})
}

func TestJoinEnoughStopsEarly(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		self, a, b := newID(t), newID(t), newID(t)
		d := &fakeDialer{failures: map[peer.ID]int{b: 100}, calls: map[peer.ID]int{}}
		got, err := Join(t.Context(), d, self, infos(a, b), Enough(1), Attempts(10))
		if err != nil || len(got) != 1 {
			t.Fatalf("Join = %v, %v", got, err)
		}
		if d.calls[b] >= 10 {
			t.Errorf("b dialled %d times after enough peers answered", d.calls[b])
		}
	})
}

func TestJoinNoneAnswered(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		self, a, b := newID(t), newID(t), newID(t)
		d := &fakeDialer{failures: map[peer.ID]int{a: 100, b: 100}, calls: map[peer.ID]int{}}
		_, err := Join(t.Context(), d, self, infos(a, b), Attempts(3))
		if !errors.Is(err, ErrNoneAnswered) {
			t.Fatalf("Join = %v, want ErrNoneAnswered", err)
		}
		for _, id := range []peer.ID{a, b} {
			if !strings.Contains(err.Error(), id.String()) {
				t.Errorf("error %q does not name peer %s", err, id)
			}
		}
		if !strings.Contains(err.Error(), "connection refused (fake, attempt 3)") {
			t.Errorf("error %q does not carry the last dial error", err)
		}
	})
}

func TestJoinNoPeers(t *testing.T) {
	self := newID(t)
	d := &fakeDialer{calls: map[peer.ID]int{}}
	if _, err := Join(t.Context(), d, self, nil); !errors.Is(err, ErrNoPeers) {
		t.Fatalf("Join(nil) = %v, want ErrNoPeers", err)
	}
	if _, err := Join(t.Context(), d, self, infos(self)); !errors.Is(err, ErrNoPeers) {
		t.Fatalf("Join(self only) = %v, want ErrNoPeers", err)
	}
}

func TestJoinOptionsValidated(t *testing.T) {
	self, a := newID(t), newID(t)
	d := &fakeDialer{calls: map[peer.ID]int{}}
	for name, o := range map[string]Option{
		"attempts":   Attempts(0),
		"backoff":    Backoff(2*time.Second, time.Second),
		"timeout":    DialTimeout(0),
		"enough":     Enough(0),
		"nil logger": Logger(nil),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Join(t.Context(), d, self, infos(a), o); err == nil {
				t.Fatal("invalid option accepted")
			}
		})
	}
}

// TestJoinLoopback joins a real host to a real bootstrap host on loopback,
// with a second bootstrap entry that nobody listens on.
func TestJoinLoopback(t *testing.T) {
	bh, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bh.Close() })
	list := strings.Join(func() []string {
		var s []string
		for _, a := range Addrs(bh) {
			s = append(s, a.String())
		}
		return s
	}(), ",")
	dead := newID(t)
	// Port 9 on loopback: discard, not served here; the dial is refused at once.
	list += ",/ip4/127.0.0.1/tcp/9/p2p/" + dead.String()
	peers, err := ParseList("test", list)
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := Join(ctx, h, h.ID(), peers, Attempts(2), Backoff(10*time.Millisecond, 20*time.Millisecond), Enough(2))
	if err != nil || len(got) != 1 || got[0] != bh.ID() {
		t.Fatalf("Join = %v, %v", got, err)
	}

	// Only the dead peer: a clear error.
	_, err = Join(ctx, h, h.ID(), peers[1:], Attempts(2), Backoff(10*time.Millisecond, 20*time.Millisecond))
	if !errors.Is(err, ErrNoneAnswered) || !strings.Contains(err.Error(), dead.String()) {
		t.Fatalf("Join(dead) = %v, want ErrNoneAnswered naming the peer", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf\n")
	f.Add("# c\n/ip6/::1/udp/1/quic-v1/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf")
	f.Add("/p2p/x")
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := Parse("fuzz", strings.NewReader(s))
		ps2, err2 := ParseList("fuzz", s)
		for _, l := range [][]peer.AddrInfo{ps, ps2} {
			for _, p := range l {
				if p.ID.Validate() != nil || len(p.Addrs) == 0 {
					t.Fatalf("parsed an invalid peer %v", p)
				}
			}
		}
		_, _ = err, err2
	})
}
