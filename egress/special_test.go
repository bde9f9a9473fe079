package egress

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/micra-net/micra/egress/egresstest"
)

// TestSpecialPurpose: the zero policy refuses every class of the table, by
// address and by URL host, naming the address or name and its registry
// entry; allow_private_networks lifts all but unspecified and multicast;
// an allowed prefix lifts its own addresses only.
func TestSpecialPurpose(t *testing.T) {
	var strict Policy
	open := Policy{AllowPrivate: true}
	world := Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, c := range egresstest.Special() {
		t.Run(c.Name, func(t *testing.T) {
			u, err := url.Parse(c.URL())
			if err != nil {
				t.Fatal(err)
			}
			err = strict.CheckHost(u.Hostname())
			if !errors.Is(err, ErrSpecialPurpose) || !errors.Is(err, ErrForbidden) {
				t.Fatalf("CheckHost(%q) = %v, want ErrSpecialPurpose", u.Hostname(), err)
			}
			if msg := err.Error(); !strings.Contains(msg, c.Class) || !strings.Contains(msg, u.Hostname()) {
				t.Fatalf("CheckHost(%q) = %q: does not name the host and %q", u.Hostname(), msg, c.Class)
			}
			if !c.IsName() {
				if err := strict.CheckAddr(c.Addr); !errors.Is(err, ErrSpecialPurpose) || !strings.Contains(err.Error(), c.Class) {
					t.Fatalf("CheckAddr(%s) = %v", c.Addr, err)
				}
			}
			never := c.Addr.Unmap().IsUnspecified() || c.Addr.Unmap().IsMulticast()
			if err := open.CheckHost(u.Hostname()); (err == nil) == never {
				t.Fatalf("allowing private networks: CheckHost(%q) = %v", u.Hostname(), err)
			}
			if never && strings.Contains(open.CheckHost(u.Hostname()).Error(), lift) {
				t.Fatal("the refusal of an address no policy allows says how to lift it")
			}
			loop := c.Addr.Unmap().Is4() && c.Addr.Unmap().IsLoopback() && !c.IsName()
			if err := world.CheckHost(u.Hostname()); (err == nil) != loop {
				t.Fatalf("allowing 127/8: CheckHost(%q) = %v", u.Hostname(), err)
			}
		})
	}
}

// TestCheckHostNames: names other than localhost pass before resolution;
// malformed hosts never panic.
func TestCheckHostNames(t *testing.T) {
	var strict Policy
	for _, h := range []string{"example.com", "localhost.example", "notlocalhost", "8.8.8.8", "[2606:4700::1111]", "", "[", "]", "..."} {
		if err := strict.CheckHost(h); err != nil {
			t.Errorf("CheckHost(%q) = %v, want nil", h, err)
		}
	}
	for _, h := range []string{"LOCALHOST", "localhost.", "a.b.localhost", "[::1]", "::1", "fe80::1%eth0"} {
		if err := strict.CheckHost(h); !errors.Is(err, ErrSpecialPurpose) {
			t.Errorf("CheckHost(%q) = %v, want ErrSpecialPurpose", h, err)
		}
	}
}

// FuzzCheckHost feeds arbitrary URL hosts to CheckHost: it never panics, a
// refusal wraps ErrSpecialPurpose, and a host refused under the zero
// policy is allowed by no more than AllowPrivate allows.
func FuzzCheckHost(f *testing.F) {
	for _, c := range egresstest.Special() {
		f.Add(c.Host)
	}
	for _, h := range []string{"example.com", "8.8.8.8", "[2606:4700::1111]", "", "[", "fe80::1%eth0", "LocalHost.", "127.1", "0x7f.1"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, host string) {
		var strict Policy
		open := Policy{AllowPrivate: true}
		err := strict.CheckHost(host)
		if err != nil && !errors.Is(err, ErrSpecialPurpose) {
			t.Fatalf("CheckHost(%q) = %v, not ErrSpecialPurpose", host, err)
		}
		if err == nil && open.CheckHost(host) != nil {
			t.Fatalf("CheckHost(%q): allowed by the zero policy, refused with private networks allowed", host)
		}
	})
}
