package overlay

import (
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/subnet"
)

// Option configures New.
type Option func(*config) error

type config struct {
	log           *slog.Logger
	prober        Prober
	delegator     Delegator
	load          LoadFunc
	anchorDepth   int
	replication   int
	heartbeat     time.Duration
	liveness      time.Duration
	maintain      time.Duration
	refresh       time.Duration // the routing table's refresh period (refresh.go)
	closestTTL    time.Duration
	cacheSize     int
	cacheTTL      time.Duration
	divPerCpl     int
	divPerTable   int
	bootstrap     []peer.AddrInfo
	publish       bool // delegation records in the DHT
	publishOrgs   bool // organisation index records in the DHT
	announce      time.Duration
	rttScale      float64 // RTTScale; 0: 1
	noCrawl       bool
	ownAddr       netip.Addr
	policy        egress.Policy // which server addresses may be delegated, resolved and probed (special.go)
	probeSched    ProbeSchedule
	probeWait     time.Duration
	redelegate    time.Duration
	orgPublish    time.Duration
	orgRefresh    time.Duration
	rateLimits    *rateLimits    // per-peer budgets of probe requests (ratelimit.go)
	audit         AuditConfig    // how audits judge and convict (audit.go)
	withhold      WithholdConfig // how withholding notices are judged (withhold.go)
	askCrawl      AskCrawlFunc   // sends a node a crawl request for a refused notice (withhold.go)
	evidence      EvidenceOpener
	refetcher     Refetcher
	ps            *pubsub.PubSub                 // given by WithPubSub; nil: the overlay makes its own
	onDHTRequest  func(from peer.ID, key []byte) // OnDHTRequest
	releaseKeys   []ed25519.PublicKey            // keys whose snapshot releases this node takes (release.go)
	releaseDir    string                         // where released snapshot files are kept
	releaseSpread time.Duration                  // longest random wait before fetching a release's file
	releaseCheck  time.Duration                  // how often a node without a next release looks for one
	prev          *subnet.Tree                   // the snapshot run before this one (carry.go)
	prevAt        time.Time                      // when the network switched from prev
}

func defaultConfig() config {
	return config{
		log:           slog.Default().With("subsystem", "overlay"),
		load:          func() (uint64, uint64) { return 0, 0 },
		replication:   3,                // the coordinator and two replicas survive one loss with a majority
		heartbeat:     30 * time.Second, // crawlers tell their coordinators they are alive
		liveness:      5 * time.Minute,  // ten missed heartbeats orphan a crawler's subnets
		maintain:      15 * time.Second, // ownership, replica and liveness checks
		refresh:       defaultRefresh,
		closestTTL:    DefaultClosestTTL,
		cacheSize:     65536,            // resolved delegations kept per node (~200 bytes each)
		cacheTTL:      10 * time.Minute, // a delegation changes rarely; stale entries are corrected by NOT_OWNER on a crawl request
		divPerCpl:     2,                // kad-dht's amino defaults: at most 2 peers per IP group per bucket
		divPerTable:   3,                // and 3 per IP group in the whole table
		announce:      15 * time.Minute, // one exchange per routing-table neighbour a round (announce.go, docs/scale.md)
		redelegate:    10 * time.Minute, // a subnet's node may ask for a new decision this often; probes cost every node asked
		orgPublish:    10 * time.Second, // changes to an organisation index coalesce for this long before one DHT put
		orgRefresh:    time.Hour,        // unchanged indexes are put again, reaching peers that became closest (records live 36 h)
		rateLimits:    defaultRateLimits(),
		audit:         AuditConfig{}.withDefaults(),
		withhold:      WithholdConfig{}.withDefaults(),
		releaseSpread: 5 * time.Minute,  // a thousand nodes fetch a 15 MB file from ever more holders
		releaseCheck:  10 * time.Minute, // a rejoining node finds a release within minutes
	}
}

// Logger sets the logger (default slog.Default with subsystem=overlay).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return check.Set(&c.log, l, check.NotNil("logger", l)) }
}

// WithProber sets the prober that answers probe requests. Without one, probe
// requests are refused with ErrUnavailable.
func WithProber(p Prober) Option {
	return func(c *config) error { c.prober = p; return nil }
}

// WithDelegator sets the delegation procedure this node runs for the shards
// it coordinates. It is required.
func WithDelegator(d Delegator) Option {
	return func(c *config) error { c.delegator = d; return nil }
}

// WithLoad sets the function reporting declared capacity and load.
func WithLoad(f LoadFunc) Option {
	return func(c *config) error { return check.Set(&c.load, f, check.NotNil("load function", f)) }
}

// AnchorDepth fixes the depth of shard anchors. By default anchors sit at
// the allocation level (see AllocationDepth and the coordinator's anchor
// rule). Every peer of an overlay must use the same setting.
func AnchorDepth(d int) Option {
	return func(c *config) error { return check.Set(&c.anchorDepth, d, check.AtLeast("anchor depth", d, 1)) }
}

// Replication sets how many peers hold each shard's state, the coordinator
// included (default 3).
func Replication(n int) Option {
	return func(c *config) error { return check.Set(&c.replication, n, check.Range("replication", n, 1, 20)) }
}

// Liveness sets the heartbeat interval and the silence after which a
// crawler's subnets are orphaned and re-delegated (defaults 30 s and 5 min).
func Liveness(heartbeat, timeout time.Duration) Option {
	return func(c *config) error {
		if heartbeat <= 0 || timeout < 2*heartbeat {
			return fmt.Errorf("liveness timeout must be at least two heartbeats, got %v and %v", heartbeat, timeout)
		}
		c.heartbeat, c.liveness = heartbeat, timeout
		return nil
	}
}

// DefaultClosestTTL is how long a closest-peer list is trusted by default
// before a DHT lookup refreshes it. A lookup costs tens of DHT requests;
// between lookups, maintenance watches the routing table for a change, and
// a request sent to a peer that is no longer the coordinator is redirected.
const DefaultClosestTTL = 5 * time.Minute

// Maintenance sets how often shards are checked for ownership, replicas and
// liveness, and how long closest-peer lists are cached before a DHT lookup
// refreshes them (defaults 15 s and DefaultClosestTTL).
func Maintenance(every, closestTTL time.Duration) Option {
	return func(c *config) error {
		if err := cmp.Or(check.Positive("maintenance interval", every), check.Positive("closest-peer TTL", closestTTL)); err != nil {
			return err
		}
		c.maintain, c.closestTTL = every, closestTTL
		return nil
	}
}

// Cache sets the size and lifetime of the resolved-delegation cache
// (defaults 65536 entries and 10 min).
func Cache(size int, ttl time.Duration) Option {
	return func(c *config) error {
		if err := cmp.Or(check.Positive("cache size", size), check.Positive("cache lifetime", ttl)); err != nil {
			return err
		}
		c.cacheSize, c.cacheTTL = size, ttl
		return nil
	}
}

// DiversityLimits sets the DHT routing table's peer-diversity filter: at
// most perCpl peers of one IP group per bucket and perTable in the whole
// table (defaults 2 and 3, kad-dht's). IPv4 groups are /16 (or /8 for
// legacy class A), so a test swarm on one loopback /16 needs higher limits.
func DiversityLimits(perCpl, perTable int) Option {
	return func(c *config) error {
		if perCpl < 1 || perTable < perCpl {
			return fmt.Errorf("diversity limits must satisfy 1 ≤ perCpl ≤ perTable, got %d and %d", perCpl, perTable)
		}
		c.divPerCpl, c.divPerTable = perCpl, perTable
		return nil
	}
}

// BootstrapPeers gives the DHT peers to fall back on when its routing table
// empties. Joining itself is bootstrap.Join's job.
func BootstrapPeers(ps []peer.AddrInfo) Option {
	return func(c *config) error { c.bootstrap = ps; return nil }
}

// PublishRecords controls whether coordinators put signed delegation
// records and organisation index records in the DHT (default: neither).
// Nothing in micra reads a delegation record from the DHT: the shard's
// coordinator and replicas hold and serve it (Lookup). An organisation
// record is OrgDelegations' fallback when the organisation shard and its
// replicas cannot be reached. Each put costs a lookup and a store at each
// of the 20 peers nearest the key: about 40 messages, as much as the rest
// of a delegation together (docs/scale.md).
func PublishRecords(delegations, orgs bool) Option {
	return func(c *config) error { c.publish, c.publishOrgs = delegations, orgs; return nil }
}

// OrgRecords sets how often a coordinator publishes the organisation index
// records of its organisation shards in the DHT: a changed index waits for
// the next round (every, default 10 s; at most 4 records are put per round),
// an unchanged one is put again after refresh (default 1 h), when
// PublishRecords switches publication on.
func OrgRecords(every, refresh time.Duration) Option {
	return func(c *config) error {
		if every < 100*time.Millisecond || refresh < every {
			return fmt.Errorf("organisation records need every ≥ 100 ms and refresh ≥ every, got %v and %v", every, refresh)
		}
		c.orgPublish, c.orgRefresh = every, refresh
		return nil
	}
}

// Announce sets how often the node exchanges announcements with its
// routing-table neighbours and the coordinators it heartbeats (default
// 15 min; its measured RTTs go to each peer about every rttEvery-th time;
// see announce.go).
func Announce(every time.Duration) Option {
	return func(c *config) error {
		return check.Set(&c.announce, every, check.AtLeast("announce interval", every, time.Second))
	}
}

// RTTScale divides every RTT this node measures to its peers (its pings,
// pingrtt.go: in Between, MeasuredBy and the RTTs it announces) by f, as
// node.ProbeScale divides its probes: on an emulated network whose time
// runs f times the real one. Default 1.
func RTTScale(f float64) Option {
	return func(c *config) error {
		if !(f > 0 && f <= 1000) {
			return fmt.Errorf("RTT scale must be in (0, 1000], got %v", f)
		}
		c.rttScale = f
		return nil
	}
}

// Egress sets which web server addresses this node delegates, resolves
// and probes, and takes in requests from peers (see special.go). The
// default, the zero egress.Policy, refuses every special-purpose address
// (loopback, private, link-local, CGNAT, documentation, multicast...) and
// the name localhost; node passes AllowPrivate for
// allow_private_networks (the emulated Internet on 127/8, tests).
// Only addresses count here: ports are the crawler's.
func Egress(p egress.Policy) Option {
	return func(c *config) error {
		for _, a := range p.Allow {
			if !a.IsValid() {
				return fmt.Errorf("egress: allowed prefix %v is not valid", a)
			}
		}
		c.policy = p
		return nil
	}
}

// NoCrawl makes the peer one that never crawls (an indexer): it announces
// so, with capacity 0, and other coordinators never ask it to probe nor
// delegate subnets to it. The overlay knows such peers only as peers that
// do not crawl; which of them index what is the results package's
// business (its indexer announcements), so indexers are discovered once.
func NoCrawl() Option {
	return func(c *config) error { c.noCrawl = true; return nil }
}

// OwnAddress is the address this node crawls from (its public address, or
// on the emulated Internet the address it binds to). Bootstrap then claims
// the node's own subnet, the smallest non-unary range containing a, as
// IPMicra delegates it to a joining crawler (paper III.D): the subnet's
// coordinator grants it when a is where the node's connection comes from,
// and retries run with the heartbeats until a claim succeeds. Default:
// none, no claim.
func OwnAddress(a netip.Addr) Option {
	return func(c *config) error {
		if !a.IsValid() {
			return errors.New("invalid own address")
		}
		c.ownAddr = a.Unmap()
		return nil
	}
}

// maxProbeWait bounds ProbeWindows' wait: the probe must still fit in its
// stream's deadline (probeDeadline) with time to run.
const maxProbeWait = probeDeadline - 10*time.Second

// ProbeWindows makes probe requests respect the operator's time windows
// (IPMicra thesis 7.6.1, "Probing"): a request that arrives outside them
// waits for the next window when it opens within maxWait (at most 20 s, so
// that the probe still fits its deadline), and is refused with
// ErrUnavailable otherwise, which the asking coordinator counts as an
// unreachable node for that decision only. Default: always open.
func ProbeWindows(s ProbeSchedule, maxWait time.Duration) Option {
	return func(c *config) error {
		if s == nil || maxWait < 0 || maxWait > maxProbeWait {
			return fmt.Errorf("probe windows need a schedule and a wait of 0 to %v, got %v", maxProbeWait, maxWait)
		}
		c.probeSched, c.probeWait = s, maxWait
		return nil
	}
}

// RedelegateInterval sets how soon after a decision the subnet's node may
// have it re-decided (Redelegate, for calibration); earlier requests get
// the current delegation back. Default 10 min.
func RedelegateInterval(d time.Duration) Option {
	return func(c *config) error {
		return check.Set(&c.redelegate, d, check.AtLeast("re-delegation interval", d, 0))
	}
}

// ReleaseKeys sets the keys whose signed snapshot releases this node takes,
// stores, serves and passes on (subnet.Release), and the directory where
// it keeps released snapshot files (at most two); releases signed by any
// other key are refused. Default: none, every release refused.
func ReleaseKeys(dir string, keys ...ed25519.PublicKey) Option {
	return func(c *config) error {
		if dir == "" && len(keys) > 0 {
			return errors.New("release keys need a directory for the snapshot files")
		}
		c.releaseDir = dir
		for _, k := range keys {
			if len(k) != ed25519.PublicKeySize {
				return fmt.Errorf("release key of %d bytes, want %d", len(k), ed25519.PublicKeySize)
			}
		}
		c.releaseKeys = keys
		return nil
	}
}

// ReleaseTiming sets the longest random wait after a release is seen before
// its snapshot file is fetched (default 5 min; shortened to half the time
// left before the activation), and how often a node that knows no release
// replacing its snapshot asks peers and the DHT for one (default 10 min).
func ReleaseTiming(spread, check time.Duration) Option {
	return func(c *config) error {
		if spread < 0 || check < time.Second {
			return fmt.Errorf("release timing needs a spread ≥ 0 and a check ≥ 1 s, got %v and %v", spread, check)
		}
		c.releaseSpread, c.releaseCheck = spread, check
		return nil
	}
}

// OnDHTRequest has f called with the requester and the key of every DHT
// request this node answers (for measurements: the DHT queries one lookup
// costs). key is the request's, not to be kept or changed.
func OnDHTRequest(f func(from peer.ID, key []byte)) Option {
	return func(c *config) error {
		c.onDHTRequest = f
		return nil
	}
}

// WithPubSub has the overlay publish on ps (NewPubSub on the same host)
// instead of a gossipsub router of its own, and leave it running at Close.
// A peer that switches snapshots keeps one router across its overlays:
// its peers' streams to a router made anew would reach the closed one
// until each failed, and messages sent meanwhile would be lost.
func WithPubSub(ps *pubsub.PubSub) Option {
	return func(c *config) error { return check.Set(&c.ps, ps, check.NotNil("pubsub", ps)) }
}

// Previous names the snapshot this node ran before the one New is given,
// and the release's activation time, when the network switched: the node
// carries its delegations of prev into the new snapshot (thesis 7.5.3:
// unchanged, split, merged; carry.go), and as a coordinator it records
// carried delegations and makes no fresh decision for one liveness
// timeout after the activation, so that no subnet is decided twice.
func Previous(prev *subnet.Tree, activation time.Time) Option {
	return func(c *config) error {
		if err := check.NotNil("previous snapshot", prev); err != nil {
			return err
		}
		c.prev, c.prevAt = prev, activation
		return nil
	}
}

func (c *config) validate() error {
	if c.delegator == nil {
		return errors.New("a delegator is required (WithDelegator)")
	}
	return nil
}
