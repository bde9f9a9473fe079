// Special-purpose addresses refused at the edge. A node neither delegates
// nor resolves nor probes the address of a web server that its egress
// policy refuses (egress.Policy: loopback, private, link-local, CGNAT,
// documentation, multicast and the rest of the IANA special-purpose
// registries, and the name localhost), and refuses such requests from
// peers, which may not share its policy: DELEGATE, SPLIT and RESOLVE of
// such an address, a PROBE of a URL on one. Each refusal
// wraps ErrForbidden (the wire's FORBIDDEN) and egress.ErrSpecialPurpose,
// and names the address or URL and its registry entry. What is already
// stored stays: a delegation of such a range decided before is neither
// deleted nor decided again.

package overlay

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/micra-net/micra/egress"
)

// EgressPolicy returns the policy set with Egress: what the results
// package checks seeds against before it asks for their delegation.
func (o *Overlay) EgressPolicy() egress.Policy { return o.cfg.policy }

// refuseAddr returns an error wrapping ErrForbidden when the policy
// refuses server address a.
func (o *Overlay) refuseAddr(a netip.Addr) error {
	if err := o.cfg.policy.CheckAddr(a); err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return nil
}

// refuse returns refuseAddr's error for a when there is one, else
// refuseURL's for u.
func (o *Overlay) refuse(a netip.Addr, u string) error {
	if err := o.refuseAddr(a); err != nil {
		return err
	}
	return o.refuseURL(u)
}

// refuseURL returns an error wrapping ErrForbidden when the policy refuses
// the host of u, an IP literal or a name of loopback (localhost). Other
// names pass: their addresses are checked where they are resolved (the
// prober's dial guard, Submit). A URL that does not parse passes too: it
// names no address, and the callers bound its size.
func (o *Overlay) refuseURL(u string) error {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return nil
	}
	if err := o.cfg.policy.CheckHost(pu.Hostname()); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrForbidden, u, err)
	}
	return nil
}

// probeRefused reports whether a prober's error is its refusal of the
// target (its egress guard found only special-purpose addresses): the
// probe did not run, and must not be stored as a failed one.
func probeRefused(err error) bool { return errors.Is(err, egress.ErrSpecialPurpose) }
