package overlay

import (
	"context"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/subnet"
)

// Prober times an HTTP HEAD to a URL from this node's own address (the
// crawler implements it). Probe returns the round-trip time, or an error
// when the probe failed, which the delegation procedure counts as an
// infinite RTT. It must be safe for concurrent use and honour ctx.
type Prober interface {
	Probe(ctx context.Context, url string) (time.Duration, error)
}

// ProberFunc adapts a function to Prober; node wires the crawler's
// fetcher with it: ProberFunc(func(ctx, u) { return f.Probe(ctx, u, 3) }).
type ProberFunc func(ctx context.Context, url string) (time.Duration, error)

// Probe implements Prober.
func (f ProberFunc) Probe(ctx context.Context, url string) (time.Duration, error) { return f(ctx, url) }

// ProbeSchedule tells when this node may probe: NextOpen returns the
// earliest time not before t inside the operator's time windows, t itself
// when they are open. crawl.Schedule and *crawl.Crawler implement it.
type ProbeSchedule interface {
	NextOpen(t time.Time) time.Time
}

// DelegateRequest is one run of the delegation procedure.
type DelegateRequest struct {
	Subnet  subnet.ID  // the smallest non-unary range containing Addr
	Addr    netip.Addr // the address of the web server that prompted the delegation
	URL     string     // a URL on that server, for probing; may be empty
	From    peer.ID    // the node that asked (the coordinator itself for re-delegations)
	Exclude []peer.ID  // nodes that must not be chosen (an orphaned subnet's silent node)
	Reason  string     // "" for a new subnet; "orphaned", or the requester's reason for a re-delegation
	// Own marks a joining node's claim of its own subnet (paper III.D).
	// The coordinator grants such claims itself, so a Delegator never sees
	// it set.
	Own bool
	// Fresh, when set, makes stored probe results of Subnet older than it
	// void: a re-delegation (calibration found the subnet's fetches slow)
	// decides with fresh probes.
	Fresh time.Time
	// Part, when valid, asks for a part of Subnet to be delegated apart
	// (Overlay.Split): a CIDR block holding Addr inside Subnet. Holder, the
	// node of the delegation it is cut from, measured Observed to Addr
	// (its crawl's timing): its answer, not a probe to issue. The Delegator
	// searches the part (subnet.PartStrategy), probes stored under it, and
	// returns Holder when no node is nearer.
	Part     subnet.Range
	Holder   peer.ID
	Observed time.Duration
}

// IsPart reports whether the request is for a part (Part is set).
func (r DelegateRequest) IsPart() bool { return r.Part.Start.IsValid() }

// Delegator runs the delegation procedure (the IPMicra search) for
// one subnet on the coordinator of its shard and returns the chosen node.
// The coordinator guarantees that calls for one subnet never overlap, stores
// and replicates the decision, and tells the chosen node. Delegate must be
// safe for concurrent use (different subnets) and honour ctx.
type Delegator interface {
	Delegate(ctx context.Context, req DelegateRequest, env DelegationEnv) (peer.ID, error)
}

// DelegationEnv is what the coordinator lends the delegation procedure.
// Methods are safe for concurrent use.
type DelegationEnv interface {
	// Tree returns the subnet hierarchy the overlay runs on.
	Tree() *subnet.Tree
	// Lookup returns the delegation of exactly the range id, asking the
	// coordinator of its shard when that is another peer.
	Lookup(ctx context.Context, id subnet.ID) (Delegation, bool, error)
	// OrgDelegations returns the delegated ranges of an organisation, from
	// its organisation shard (at most 512), or from the shard's index
	// record in the DHT when its coordinator cannot be reached.
	OrgDelegations(ctx context.Context, org string) ([]Delegation, error)
	// Probe asks p to probe url and stores the result with r, the subnet
	// decided or a part of it, in the shard's replicated state. A probe
	// that p ran and that failed returns an error wrapping ErrProbeFailed
	// and is stored as failed; any other error means p did not probe:
	// when p could not be asked (gone, unreachable) that is stored as a
	// failed probe too, when it refused (it does not probe, is
	// overloaded) nothing is stored. Beside the probe it asks p for its
	// row of measured RTTs when it holds no fresh copy (rttrow.go).
	Probe(ctx context.Context, p peer.ID, url string, r subnet.Range) (time.Duration, error)
	// Probes returns the stored probe results for subnet s.
	Probes(s subnet.ID) []ProbeResult
	// Peers returns the live peers the coordinator knows, with their
	// declared capacity and load where known.
	Peers() []PeerInfo

	// Anchor returns the anchor of the shard the decision runs in: the
	// shard's store holds every delegation and probe result of its
	// subtree. Ranges outside it are known only through Lookup,
	// OrgDelegations and Block.
	Anchor() subnet.ID
	// Delegations returns the shard's delegations, orphaned ones left out,
	// from its store (no network; at most 65536).
	Delegations() []Delegation
	// ProbesWithin returns the stored probe results of every subnet inside
	// r (r included) from the shard's store (no network; at most 65536).
	ProbesWithin(r subnet.Range) []ProbeResult
	// Block returns the index of decisions under x, a strict ancestor of
	// the shard's anchor: the delegations under x at most two levels below
	// it, and the decisions of every subnet under x with their probe
	// results (sharing probes across shards), the 128 nearest in address
	// to the anchor. It costs one request to x's block shard (none when
	// this node coordinates it).
	Block(ctx context.Context, x subnet.ID) ([]IndexedDelegation, error)
	// Reassign moves subnet t, delegated to from, to node to, on t's
	// coordinator (load balancing: from is full and took the decision's
	// subnet). It costs one request, none when t is in this shard.
	Reassign(ctx context.Context, t subnet.ID, from, to peer.ID) (Delegation, error)
	// Between returns the round-trip time between two peers as the overlay
	// measured it (see Overlay.Between), and false when unknown.
	Between(a, b peer.ID) (time.Duration, bool)
	// MeasuredBy returns the round-trip time from peer by to peer of as
	// by measured it (this node's own latency when by is this node; else
	// what by announced), never what of announced: the claim check's
	// witnesses (subnet.ClaimCheck) must not take a claimant's word.
	MeasuredBy(by, of peer.ID) (time.Duration, bool)
	// Self returns the coordinator's own peer id: the one witness whose
	// probes the claim check need not doubt.
	Self() peer.ID
	// MayCrawl reports whether p may be given subnets as far as the
	// coordinator knows (Overlay.MayCrawl): a node named in stored probes
	// but not among Peers is a candidate only then.
	MayCrawl(p peer.ID) bool
}

// IndexedDelegation is a delegation as a block shard indexes it: with the
// probe results its coordinator had stored for the subnet.
type IndexedDelegation struct {
	Delegation
	Probes []ProbeResult
}

// ProbeResult is a stored probe: Peer timed RTT to a server in Subnet.
type ProbeResult struct {
	Subnet subnet.Range
	Peer   peer.ID
	RTT    time.Duration // negative for a failed probe
	At     time.Time
}

// PeerInfo is what a coordinator knows about a live peer.
type PeerInfo struct {
	ID       peer.ID
	Capacity uint64 // pages per day; 0 when unknown
	Load     uint64 // pages per day
	Subnets  uint32 // subnets the peer crawls; 0 when unknown
	LoadAt   time.Time
	Seen     time.Time
}

// LoadFunc reports this node's declared capacity and current load in pages
// per day, sent with heartbeats and announcements.
type LoadFunc func() (capacity, load uint64)

// Claim is what a node's signed result record states about a page: its
// author fetched URL at Time and found Status and a body whose weighted
// stems hash to Fingerprint (a 64-bit SimHash).
type Claim struct {
	Node        peer.ID
	URL         string
	Status      int
	Fingerprint uint64
	Time        time.Time
}

// EvidenceOpener verifies an audit's evidence — a record's author's signed
// statement, in a form the results layer defines — and returns what it
// claims about url. It fails with an error wrapping ErrBadEvidence when the
// evidence is malformed, not signed by the node it names, or holds no
// record of url. node wires results.OpenEvidence; overlay cannot read
// result batches itself. It must be safe for concurrent use and bound its
// work by the evidence's size.
type EvidenceOpener interface {
	OpenEvidence(evidence []byte, url string) (Claim, error)
}

// EvidenceOpenerFunc adapts a function to EvidenceOpener.
type EvidenceOpenerFunc func(evidence []byte, url string) (Claim, error)

// OpenEvidence implements EvidenceOpener.
func (f EvidenceOpenerFunc) OpenEvidence(evidence []byte, url string) (Claim, error) {
	return f(evidence, url)
}

// Page is what a node saw fetching a page afresh for an audit.
type Page struct {
	URL, FinalURL string
	Status        int
	// Fingerprint is the SimHash the node's crawler computes for the body,
	// as its records carry it; 0 when the status is not 2xx or the type is
	// not parsed.
	Fingerprint uint64
	At          time.Time
	// NoIndex: the page asks not to be indexed; the crawler makes no
	// record of it (a withholding notice about it is not confirmed).
	NoIndex bool
}

// Refetcher fetches a page afresh from this node's own address, politely,
// and analyses it as the crawler would (crawl.(*Crawler).Refetch). It must
// be safe for concurrent use and honour ctx.
type Refetcher interface {
	Refetch(ctx context.Context, url string) (Page, error)
}

// RefetcherFunc adapts a function to Refetcher.
type RefetcherFunc func(ctx context.Context, url string) (Page, error)

// Refetch implements Refetcher.
func (f RefetcherFunc) Refetch(ctx context.Context, url string) (Page, error) { return f(ctx, url) }
