package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

var protoUnmarshal = proto.Unmarshal

// Overlay is one node's presence in micra's overlay: the DHT, the pubsub
// topics, the stream protocols and the shards it coordinates or replicates.
// Its methods are safe for concurrent use.
type Overlay struct {
	h    host.Host
	sk   crypto.PrivKey
	tree *subnet.Tree
	sid  subnet.SnapshotID
	db   *badger.DB
	cfg  config
	log  *slog.Logger

	dht      *dht.IpfsDHT
	reach    atomic.Int32 // network.Reachability as AutoNAT last reported it (watchReachability)
	ps       *pubsub.PubSub
	releases *pubsub.Topic
	rel      *releaseState // the release replacing the running snapshot (release.go)
	coord    *coordinator
	cache    *cache
	handlers map[protocol.ID]map[pb.Message_Type]handler // dispatchTable, read-only after New
	// orgValidator checks organisation records read back from the DHT.
	orgValidator RecordValidator
	stats        counters
	// Per-peer budgets of audit and refetch requests (audit.go), and of
	// announcements (announce.go).
	auditLimit, refetchLimit, announceLimit, withheldLimit *peerLimiter
	announceNow                                            chan struct{} // announceSoon's signal to announceLoop
	announceRounds                                         atomic.Int32  // regular announcement rounds started

	mu         sync.Mutex
	mine       map[[32]byte]shardRef            // shards in which this node holds delegations
	owned      map[string]Delegation            // subnets and parts delegated to this node, by range key
	ownedIn    map[[32]byte]map[string]struct{} // owned's range keys by the key of their shard (heartbeats)
	changes    changeLog                        // the latest changes of owned, for operators
	ownedParts int                              // parts in owned
	wonRTT     map[string]time.Duration         // owned subnets' winning probe, as their coordinator stored it
	askQ       chan Delegation                  // dropped subnets to ask about again (askAgainLoop)
	unheld     map[[32]byte][]string            // by shard: range keys its last heartbeat ack listed as this node's that it did not hold
	peers      map[peer.ID]PeerInfo             // announced peers, bounded
	rtts       map[peer.ID]map[peer.ID]int64    // announced peers' measured RTTs to others, µs
	told       map[peer.ID]told                 // announcements exchanged, by peer, bounded
	// nonCrawlers are peers that announced they do not crawl (NoCrawl,
	// capacity 0): never delegation candidates. Bounded like peers.
	nonCrawlers   map[peer.ID]time.Time
	coordFor      map[[32]byte]peer.ID // last known coordinator per shard
	beats         beatKeeper           // the connection manager's tag on heartbeat peers (keepconn.go)
	probeSlots    *peerSlots           // probe requests in flight, per peer
	ownDone       atomic.Bool          // the own-subnet claim succeeded (or none is configured)
	probesCarried atomic.Bool          // the previous snapshot's stored probes are carried (carryprobes.go)
	carryBusy     atomic.Bool          // a pass of carries is running (startCarries)
	ownArmed      atomic.Bool          // ClaimOwn ran once (Bootstrap or the first node's Join): the heartbeats retry it
	// joined: Bootstrap's self lookup completed, so the routing table
	// holds this node's neighbourhood (a claim trusts its view; ensureOwner).
	joined atomic.Bool

	ctx       context.Context // the loops' and handlers' lifetime
	cancel    context.CancelFunc
	netCancel context.CancelFunc // the DHT's and pubsub's lifetime, ended after the loops
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// Requests being served (serve): Close waits for them, so that none
	// touches the database its owner closes after Close returns.
	serving  sync.Mutex
	streams  map[network.Stream]struct{} // nil once Close began: refuse new ones
	inFlight sync.WaitGroup
}

type counters struct {
	requests, lookups, cacheHits, cacheMisses, redirects, puts atomic.Int64
	audits, refetches, convictions, withheldNotices            atomic.Int64
	releasesRefused, releaseBadPeers, releaseBytes             atomic.Int64
	dhtServed, refreshes, adopted                              atomic.Int64
	kinds                                                      sync.Map // msgKind -> *atomic.Int64
	takenBack                                                  sync.Map // reason -> *atomic.Int64
}

// countTakenBack counts a subnet this node, as its coordinator, took from
// its node, by reason.
func (c *counters) countTakenBack(reason string) {
	v, _ := c.takenBack.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// msgKind is a message's protocol and type, as Stats.Kinds counts them.
type msgKind struct {
	dht bool // a DHT request served, else a micra request sent
	t   int32
	key dhtKey // a DHT request's key
}

// dhtKey sorts DHT requests by their key, for measurements.
type dhtKey uint8

const (
	keyOther    dhtKey = iota // another peer's ID: the DHT's bucket refreshes, peer routing
	keyAsker                  // the asker's own ID: self-lookups (the DHT's refresh, micra's neighbourhood lookup)
	keyAnswerer               // the answering node's ID: kad-dht's check of a peer before it enters or stays in a routing table
	keyShard                  // a 32-byte key: a shard's (micra's lookups and walks) or a record's
)

func keyOf(key []byte, asker, answerer peer.ID) dhtKey {
	switch {
	case string(key) == string(asker):
		return keyAsker
	case string(key) == string(answerer):
		return keyAnswerer
	case len(key) == 32:
		return keyShard
	}
	return keyOther
}

func (k msgKind) String() string {
	if k.dht {
		s := "dht/" + dhtpb.Message_MessageType(k.t).String()
		switch k.key {
		case keyAsker:
			s += " (asker's ID)"
		case keyAnswerer:
			s += " (answerer's ID)"
		case keyShard:
			s += " (32-byte key)"
		}
		return s
	}
	return "micra/" + pb.Message_Type(k.t).String()
}

// count adds one to the counter of a message kind.
func (c *counters) count(kind msgKind) {
	v, ok := c.kinds.Load(kind)
	if !ok {
		v, _ = c.kinds.LoadOrStore(kind, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// Stats are cumulative counters of one overlay, for measurements.
type Stats struct {
	Requests  int64 // request streams opened by this node (all micra protocols)
	Lookups   int64 // DHT closest-peer lookups
	DHTServed int64 // DHT requests this node answered (every peer's lookups, puts and gets)
	Refreshes int64 // routing-table refreshes after the join's (refresh.go)
	// Adopted counts the subnets this node took up because its
	// coordinator's heartbeat acks listed them as its own though their
	// ASSIGN never reached it (mine.go).
	Adopted     int64
	CacheHits   int64 // Resolve answered from the cache
	CacheMisses int64
	Redirects   int64 // NOT_COORDINATOR answers followed
	Puts        int64 // organisation index records put in the DHT
	Audits      int64 // audits judged as a coordinator (evidence verified)
	Refetches   int64 // pages fetched afresh for audits, as an auditor
	Convictions int64 // nodes convicted by audits, as a coordinator
	// WithheldNotices counts the withholding notices about a subnet's
	// current node this node took as a coordinator (withhold.go).
	WithheldNotices int64
	// Releases: refused (unsigned, untrusted, malformed, out-of-bounds
	// times, too large), peers that served a wrong snapshot file, and
	// snapshot file bytes fetched.
	ReleasesRefused int64
	ReleaseBadPeers int64
	ReleaseBytes    int64
	// Notices are the notices a coordinator's decisions set off (to the
	// node chosen, the organisation and block indexes, the DHT) that are
	// queued or being sent.
	Notices int64
	// TakenBack counts the subnets this node, as a coordinator, took
	// from their nodes and decided again, by reason: "orphaned" (silent
	// past the liveness timeout), "convicted" (by audits), "withheld"
	// (crawl requests left unanswered, withhold.go), "refused" (crawl
	// requests not taken).
	TakenBack map[string]int64
	// Kinds counts messages by kind: the micra requests this node sent
	// ("micra/" and the message type) and the DHT requests it answered
	// ("dht/" and the DHT message type, with " (asker's ID)" or
	// " (answerer's ID)" when the key was one of those and " (32-byte key)"
	// for a shard's or a record's key), for measurements.
	Kinds map[string]int64
}

// Stats returns the counters so far.
func (o *Overlay) Stats() Stats {
	st := Stats{
		Requests: o.stats.requests.Load(), Lookups: o.stats.lookups.Load(),
		CacheHits: o.stats.cacheHits.Load(), CacheMisses: o.stats.cacheMisses.Load(),
		Redirects: o.stats.redirects.Load(), Puts: o.stats.puts.Load(), DHTServed: o.stats.dhtServed.Load(),
		Refreshes: o.stats.refreshes.Load(), Adopted: o.stats.adopted.Load(), Audits: o.stats.audits.Load(), Refetches: o.stats.refetches.Load(), Convictions: o.stats.convictions.Load(),
		WithheldNotices: o.stats.withheldNotices.Load(),
		ReleasesRefused: o.stats.releasesRefused.Load(), ReleaseBadPeers: o.stats.releaseBadPeers.Load(),
		ReleaseBytes: o.stats.releaseBytes.Load(), Kinds: map[string]int64{}, TakenBack: map[string]int64{},
		Notices: int64(len(o.coord.assignQ)+len(o.coord.orgQ)+len(o.coord.blockQ)+len(o.coord.pubQ)) + o.coord.noticing.Load(),
	}
	o.stats.kinds.Range(func(k, v any) bool {
		st.Kinds[k.(msgKind).String()] = v.(*atomic.Int64).Load()
		return true
	})
	o.stats.takenBack.Range(func(k, v any) bool {
		st.TakenBack[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return st
}

// New starts the overlay on h for the subnet tree (every peer must run the
// same snapshot) with state in db under Prefix. It builds the DHT (server
// mode, protocol prefix /micra, the routing-table diversity filter, micra's
// record validators), GossipSub with the release topic, registers the
// stream protocols, and starts the maintenance, heartbeat and announcement
// loops. It does not dial anyone: join with bootstrap.Join, then call
// Bootstrap. The caller keeps ownership of h and db and closes
// them after Close (host first, badger last).
func New(h host.Host, tree *subnet.Tree, db *badger.DB, opts ...Option) (o *Overlay, err error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if h == nil || tree == nil || db == nil {
		return nil, errors.New("overlay needs a host, a tree and a database")
	}
	sk := h.Peerstore().PrivKey(h.ID())
	if sk == nil {
		return nil, errors.New("host has no private key in its peerstore")
	}
	o = &Overlay{
		h: h, sk: sk, tree: tree, sid: tree.ID(), db: db, cfg: cfg, log: cfg.log,
		cache:         newCache(cfg.cacheSize, cfg.cacheTTL),
		streams:       map[network.Stream]struct{}{},
		mine:          map[[32]byte]shardRef{},
		owned:         map[string]Delegation{},
		ownedIn:       map[[32]byte]map[string]struct{}{},
		wonRTT:        map[string]time.Duration{},
		askQ:          make(chan Delegation, maxAskAgain),
		unheld:        map[[32]byte][]string{},
		peers:         map[peer.ID]PeerInfo{},
		rtts:          map[peer.ID]map[peer.ID]int64{},
		told:          map[peer.ID]told{},
		coordFor:      map[[32]byte]peer.ID{},
		probeSlots:    newPeerSlots(probeStreamsPerPeer),
		auditLimit:    newPeerLimiter(cfg.audit.AuditRate, float64(cfg.audit.AuditBurst)),
		refetchLimit:  newPeerLimiter(cfg.audit.RefetchRate, float64(cfg.audit.RefetchBurst)),
		announceLimit: newPeerLimiter(announceRate, announceBurst),
		withheldLimit: newPeerLimiter(cfg.withhold.Rate, float64(cfg.withhold.Burst)),
		announceNow:   make(chan struct{}, 1),
		rel:           newReleaseState(),
	}
	// An own address the policy refuses (a LAN address given as
	// source_addr) has no subnet to claim.
	o.ownDone.Store(!cfg.ownAddr.IsValid() || cfg.policy.CheckAddr(cfg.ownAddr) != nil)
	o.ctx, o.cancel = context.WithCancel(context.Background())
	netCtx, netCancel := context.WithCancel(context.Background())
	o.netCancel = netCancel
	defer func() {
		if err != nil {
			err = errors.Join(err, o.Close())
		}
	}()

	validators := record.NamespacedValidator{"pk": record.PublicKeyValidator{}}
	writerChk := new(atomic.Pointer[writerCheck])
	for ns, v := range newRecordValidators(tree, writerChk) {
		validators[ns] = v
	}
	o.orgValidator = validators[OrgNamespace].(RecordValidator)
	validators[ReleaseNamespace] = releaseValidator{keys: cfg.releaseKeys}
	dopts := []dht.Option{
		// A DHT server unless AutoNAT finds the node private: a node behind
		// NAT, reached only through relays, stays out of routing tables,
		// lookups and shard coordination (internal/nattest).
		dht.Mode(dht.ModeAutoServer),
		dht.ProtocolPrefix(DHTPrefix),
		dht.Validator(validators),
		dht.RoutingTablePeerDiversityFilter(dht.NewRTPeerDiversityFilter(h, cfg.divPerCpl, cfg.divPerTable)),
		dht.DisableProviders(),
		// refresh.go runs the routing-table refresh; a bucket counts as
		// fresh for half its period.
		dht.DisableAutoRefresh(),
		dht.RoutingTableRefreshPeriod(cfg.refresh / 2),
		// Kademlia's α: three queries in flight per lookup rather than
		// kad-dht's ten, which at micra's sizes query most of the peers
		// they will ever meet in the first round (docs/scale.md).
		dht.Concurrency(3),
		dht.OnRequestHook(func(_ context.Context, s network.Stream, m *dhtpb.Message) {
			o.stats.dhtServed.Add(1)
			from := s.Conn().RemotePeer()
			o.stats.count(msgKind{dht: true, t: int32(m.GetType()), key: keyOf(m.GetKey(), from, h.ID())})
			if f := cfg.onDHTRequest; f != nil {
				f(from, m.GetKey())
			}
		}),
	}

	if len(cfg.bootstrap) > 0 {
		dopts = append(dopts, dht.BootstrapPeers(cfg.bootstrap...))
	}
	o.dht, err = dht.New(netCtx, h, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	if o.ps = cfg.ps; o.ps == nil {
		if o.ps, err = NewPubSub(netCtx, h, cfg.log); err != nil {
			return nil, err
		}
	}
	if len(cfg.releaseKeys) > 0 {
		// Without release keys every release would be refused: the node
		// neither joins the release topic nor looks for releases.
		if err := o.ps.RegisterTopicValidator(TopicRelease, o.validateRelease); err != nil {
			return nil, err
		}
		if o.releases, err = o.ps.Join(TopicRelease); err != nil {
			return nil, err
		}
		if err := o.loadReleases(); err != nil {
			return nil, err
		}
	}
	o.beats = newBeatKeeper(h, cfg.heartbeat)
	if o.coord, err = newCoordinator(o); err != nil {
		return nil, err
	}
	chk := writerCheck(o.coord.plausibleWriter)
	writerChk.Store(&chk)
	if err := o.loadMine(); err != nil {
		return nil, err
	}

	o.handlers = o.dispatchTable()
	h.SetStreamHandler(ProbeID, o.serve(probeSpec, o.handlers[ProbeID]))
	h.SetStreamHandler(CoordinateID, o.serve(coordSpec, o.handlers[CoordinateID]))
	h.SetStreamHandler(ReplicateID, o.serveReplicate())
	h.SetStreamHandler(AuditID, o.serve(auditSpec, o.handlers[AuditID]))
	h.SetStreamHandler(ReleaseID, o.serve(releaseSpec, o.handlers[ReleaseID]))
	h.SetStreamHandler(AnnounceID, o.serve(announceSpec, o.handlers[AnnounceID]))

	if o.releases != nil {
		rsub, err := o.releases.Subscribe(pubsub.WithBufferSize(8))
		if err != nil {
			return nil, err
		}
		o.wg.Go(func() { o.readReleases(rsub) })
		o.wg.Go(o.releaseLoop)
	}
	rsubReach, err := h.EventBus().Subscribe(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return nil, fmt.Errorf("reachability events: %w", err)
	}
	o.wg.Go(func() { o.watchReachability(rsubReach) })
	rsubAddrs, err := h.EventBus().Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		return nil, fmt.Errorf("address events: %w", err)
	}
	o.wg.Go(func() { o.refreshLoop(rsubAddrs) })
	o.wg.Go(func() { o.coord.notifier(o.ctx) })
	o.wg.Go(func() { o.coord.refresher(o.ctx) })
	o.wg.Go(o.askAgainLoop)
	o.wg.Go(func() { o.coord.convictionLoop(o.ctx) })
	o.wg.Go(func() { o.every(o.cfg.maintain, o.coord.maintain) })
	o.wg.Go(func() { o.every(o.cfg.heartbeat, o.heartbeatAll) })
	o.wg.Go(o.announceLoop)
	o.wg.Go(func() { o.every(o.cfg.orgPublish, o.coord.publishOrgs) })
	return o, nil
}

// Reachability is what AutoNAT last reported about the host (the event is
// stateful: the overlay has the current value from its start). A host
// found private serves no DHT requests (dht.ModeAutoServer makes it a DHT
// client) and so does not count itself among a shard's closest peers.
func (o *Overlay) Reachability() network.Reachability {
	return network.Reachability(o.reach.Load())
}

// watchReachability keeps o.reach current until Close, and logs changes.
func (o *Overlay) watchReachability(sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-o.ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			r := e.(event.EvtLocalReachabilityChanged).Reachability
			if network.Reachability(o.reach.Swap(int32(r))) != r {
				o.log.Info("reachability", "reachability", r.String())
			}
		}
	}
}

// NewPubSub makes the gossipsub router an overlay publishes on, running
// until ctx ends. An overlay makes its own unless it is given one
// (WithPubSub).
func NewPubSub(ctx context.Context, h host.Host, log *slog.Logger) (*pubsub.PubSub, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMaxMessageSize(1<<20),
		pubsub.WithPeerExchange(true),
		pubsub.WithLogger(log.With("subsystem", "pubsub")),
	)
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	return ps, nil
}

// Bootstrap joins the DHT through the peers the host is connected to
// (after bootstrap.Join): it adds them to the routing table and runs a
// lookup of this node's own id, which is how a Kademlia node makes itself
// known to, and learns, its neighbourhood, the peers shard ownership
// depends on. A routing-table refresh then runs in the background. With
// OwnAddress, the node claims its own subnet (see ClaimOwn) at the same
// time: the claim's lookup of its shard's coordinator does not need the
// self lookup, so the two overlap rather than add up. A failed claim is
// logged and retried with the heartbeats. Bootstrap returns when both are
// done.
func (o *Overlay) Bootstrap(ctx context.Context) error {
	for _, p := range o.h.Network().Peers() {
		o.dht.RoutingTable().TryAddPeer(p, true, false)
	}
	if o.dht.RoutingTable().Size() == 0 {
		return fmt.Errorf("bootstrap: %w: no DHT server among the connected peers", ErrNoPeers)
	}
	var claim sync.WaitGroup
	if !o.ownDone.Load() && !o.cfg.noCrawl {
		claim.Go(func() {
			if _, err := o.ClaimOwn(ctx); err != nil {
				o.log.Warn("claiming the own subnet failed; retrying with the heartbeats", "error", err)
			}
		})
	}
	defer claim.Wait()
	o.stats.lookups.Add(1)
	if _, err := o.dht.GetClosestPeers(ctx, string(o.h.ID())); err != nil {
		return fmt.Errorf("bootstrap: self lookup: %w", err)
	}
	o.joined.Store(true)
	_ = o.dht.RefreshRoutingTable()
	return nil
}

// ClaimOwn has this node delegated its own subnet, the smallest non-unary
// range containing its OwnAddress: IPMicra delegates a joining crawler the
// subnet it sits in at once (paper III.D), without probing. The subnet's
// coordinator grants the claim when one of its live connections with this
// node has this node's end in that subnet, replacing a delegation decided
// by search but not another node's own claim (the first claimer keeps it;
// the answer names it). Bootstrap calls it. Once it has been called, a
// failed claim is retried with the heartbeats; never before, so that a
// node that has not joined yet does not coordinate its own shard alone.
func (o *Overlay) ClaimOwn(ctx context.Context) (Delegation, error) {
	if o.cfg.noCrawl {
		return Delegation{}, nil // it crawls nothing, its own subnet included
	}
	a := o.cfg.ownAddr
	if !a.IsValid() {
		return Delegation{}, errors.New("claim own subnet: no own address configured")
	}
	if err := o.refuseAddr(a); err != nil {
		return Delegation{}, fmt.Errorf("claim own subnet: %w", err)
	}
	o.ownArmed.Store(true)
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("claim own subnet: %v is outside the hierarchy", a)
	}
	req := newMsg(pb.Message_DELEGATE)
	req.Delegate = &pb.Delegate{Snapshot: o.sid[:], Addr: a.AsSlice(), Own: true}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, fmt.Errorf("claim own subnet: %w", err)
	}
	d, err := o.checkDelegation(resp.GetDelegation().GetRecord(), o.tree.Range(id))
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, false)
	if d.Node == o.h.ID() {
		o.noteAssigned(resp.GetDelegation().GetRecord())
	}
	o.ownDone.Store(true)
	return d, nil
}

// Host returns the libp2p host.
func (o *Overlay) Host() host.Host { return o.h }

// DHT returns the Kademlia DHT.
func (o *Overlay) DHT() *dht.IpfsDHT { return o.dht }

// PubSub returns the GossipSub router (results joins sharded result topics
// through it).
func (o *Overlay) PubSub() *pubsub.PubSub { return o.ps }

// Tree returns the subnet hierarchy.
func (o *Overlay) Tree() *subnet.Tree { return o.tree }

// Close stops the loops and protocol handlers, waits for them and for the
// DHT lookups in flight, and closes the DHT. It does not close the host or
// the database. It is safe to call more than once; later calls return the
// first result.
func (o *Overlay) Close() error {
	o.closeOnce.Do(func() {
		for _, id := range []string{string(ProbeID), string(CoordinateID), string(ReplicateID), string(AuditID), string(ReleaseID), string(AnnounceID)} {
			o.h.RemoveStreamHandler(protocolID(id))
		}
		o.cancel()
		o.stopServing()
		o.wg.Wait()
		if o.coord != nil {
			o.coord.stop()
		}
		var errs []error
		if o.releases != nil {
			errs = append(errs, o.ps.UnregisterTopicValidator(TopicRelease), o.releases.Close())
		}
		o.beats.close()
		o.netCancel()
		if o.dht != nil {
			errs = append(errs, o.dht.Close())
		}
		o.closeErr = errors.Join(errs...)
	})
	return o.closeErr
}

func (o *Overlay) every(d time.Duration, f func(context.Context)) {
	// A random first delay spreads the swarm's rounds.
	t := time.NewTimer(time.Duration(float64(d) * (0.5 + randFloat()/2)))
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		}
		f(o.ctx)
		t.Reset(d)
	}
}

// Resolve returns the delegation holding a: the most specific part of a's
// smallest non-unary range delegated apart that holds a (Split), else the
// range's own; false when neither is delegated. Delegations resolved
// before come from the cache without a network round trip. An address the
// Egress policy refuses is refused (ErrForbidden) without asking anyone.
func (o *Overlay) Resolve(ctx context.Context, a netip.Addr) (Delegation, bool, error) {
	if err := o.refuseAddr(a); err != nil {
		return Delegation{}, false, fmt.Errorf("resolve: %w", err)
	}
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, false, fmt.Errorf("resolve %v: invalid address", a)
	}
	a = a.Unmap()
	if d, ok := o.cache.holding(o.tree.Range(id), a); ok {
		o.stats.cacheHits.Add(1)
		return d, true, nil
	}
	o.stats.cacheMisses.Add(1)
	req := newMsg(pb.Message_RESOLVE)
	req.Resolve = &pb.Resolve{Snapshot: o.sid[:], Addr: a.AsSlice()}
	return o.resolveReq(ctx, id, a, req)
}

// Cached returns the delegation holding a (as Resolve) when this node knows
// it without asking anyone: a subnet or part delegated to this node, or one
// resolved, delegated or announced recently (the cache); the more specific
// of the two.
// It never touches the network; false means "not known here".
func (o *Overlay) Cached(a netip.Addr) (Delegation, bool) {
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, false
	}
	a = a.Unmap()
	r := o.tree.Range(id)
	o.mu.Lock()
	own, mine := mostSpecific(r, a, o.ownedParts > 0, func(r subnet.Range) (Delegation, bool) {
		d, ok := o.owned[string(rangeKey(r))]
		return d, ok
	})
	o.mu.Unlock()
	if d, ok := o.cache.holding(r, a); ok && (!mine || own.Subnet.ContainsRange(d.Subnet)) {
		return d, true
	}
	return own, mine
}

// Lookup returns the delegation of exactly the range id, asking the
// coordinator of its shard.
func (o *Overlay) Lookup(ctx context.Context, id subnet.ID) (Delegation, bool, error) {
	r := o.tree.Range(id)
	if d, ok := o.cache.get(r); ok {
		o.stats.cacheHits.Add(1)
		return d, true, nil
	}
	req := newMsg(pb.Message_RESOLVE)
	req.Resolve = &pb.Resolve{Snapshot: o.sid[:], Subnet: rangeToPB(r)}
	return o.resolveReq(ctx, id, netip.Addr{}, req)
}

// resolveReq asks the coordinator of range id: about address a (its
// delegation, a part or id's own), or about exactly id when a is invalid.
func (o *Overlay) resolveReq(ctx context.Context, id subnet.ID, a netip.Addr, req *pb.Message) (Delegation, bool, error) {
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, false, err
	}
	sr := resp.GetDelegation().GetRecord()
	if sr == nil {
		return Delegation{}, false, nil
	}
	var d Delegation
	if a.IsValid() {
		d, err = o.checkHolding(sr, id, a)
	} else {
		d, err = o.checkDelegation(sr, o.tree.Range(id))
	}
	if err != nil {
		return Delegation{}, false, err
	}
	if d.Orphaned {
		return Delegation{}, false, nil
	}
	o.cache.put(d, d.Subnet != o.tree.Range(id))
	return d, true, nil
}

// openDelegation verifies a received delegation record.
func (o *Overlay) openDelegation(sr *pb.SignedRecord) (Delegation, error) {
	rec, err := openRecord(o.sid, sr)
	if err != nil {
		return Delegation{}, err
	}
	if rec.GetKind() != pb.Record_DELEGATION {
		return Delegation{}, fmt.Errorf("%w: not a delegation", ErrBadRecord)
	}
	return delegationFrom(rec), nil
}

// checkDelegation verifies a delegation record received for subnet r.
func (o *Overlay) checkDelegation(sr *pb.SignedRecord, r subnet.Range) (Delegation, error) {
	d, err := o.openDelegation(sr)
	if err != nil {
		return Delegation{}, err
	}
	if d.Subnet != r {
		return Delegation{}, fmt.Errorf("%w: record for %s, asked about %s", ErrBadRecord, d.Subnet, r)
	}
	return d, nil
}

// Delegate returns the node crawling the subnet of a (the address url's
// host resolved to), running the delegation procedure on the subnet's
// coordinator when the subnet is not yet delegated. Concurrent calls for one
// subnet from any nodes yield one decision. When a lies in a part of the
// subnet delegated apart (Split), the part's delegation is returned. An
// address or URL host the Egress policy refuses is refused (ErrForbidden)
// without asking anyone.
func (o *Overlay) Delegate(ctx context.Context, url string, a netip.Addr) (Delegation, error) {
	if err := o.refuse(a, url); err != nil {
		return Delegation{}, fmt.Errorf("delegate: %w", err)
	}
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("delegate %v: invalid address", a)
	}
	if len(url) > maxURLLen {
		return Delegation{}, fmt.Errorf("delegate: %w: URL of %d bytes", ErrTooLarge, len(url))
	}
	a = a.Unmap()
	if d, ok := o.cache.holding(o.tree.Range(id), a); ok {
		o.stats.cacheHits.Add(1)
		return d, nil
	}
	req := newMsg(pb.Message_DELEGATE)
	req.Delegate = &pb.Delegate{Snapshot: o.sid[:], Addr: a.AsSlice(), Url: url}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkHolding(resp.GetDelegation().GetRecord(), id, a)
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, d.Subnet != o.tree.Range(id))
	if d.Node == o.h.ID() {
		o.noteAssigned(resp.GetDelegation().GetRecord())
	}
	return d, nil
}

// Redelegate asks the coordinator to run the delegation procedure again for
// subnet r, which must be delegated to this node (calibration: its fetches
// got slow). It returns the new delegation.
func (o *Overlay) Redelegate(ctx context.Context, r subnet.Range, reason string) (Delegation, error) {
	id, ok := o.tree.Find(r)
	if !ok {
		return Delegation{}, fmt.Errorf("redelegate %s: %w", r, ErrNotFound)
	}
	if len(reason) > 256 {
		reason = reason[:256]
	}
	req := newMsg(pb.Message_REDELEGATE)
	req.Redelegate = &pb.Redelegate{Snapshot: o.sid[:], Subnet: rangeToPB(r), Reason: reason}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(id), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkDelegation(resp.GetDelegation().GetRecord(), r)
	if err != nil {
		return Delegation{}, err
	}
	o.cache.invalidate(r)
	o.cache.put(d, false)
	return d, nil
}

// Recalibrate asks for a new decision for the subnet of server address a,
// with fresh probes, because this node's fetches from it got slow (IPMicra
// thesis 7.6.2; crawl.Calibrator signals it). It does nothing, returning
// ErrNotFound, when the subnet is not delegated to this node. The
// coordinator answers with the current delegation when the subnet was
// decided less than the RedelegateInterval ago.
func (o *Overlay) Recalibrate(ctx context.Context, a netip.Addr, reason string) (Delegation, error) {
	id := o.tree.SmallestNonUnary(a)
	if id == subnet.None {
		return Delegation{}, fmt.Errorf("recalibrate %v: invalid address", a)
	}
	r := o.tree.Range(id)
	o.mu.Lock()
	_, mine := o.owned[string(rangeKey(r))]
	o.mu.Unlock()
	if !mine {
		return Delegation{}, fmt.Errorf("recalibrate %s: %w: not delegated to this node", r, ErrNotFound)
	}
	if reason == "" {
		reason = "calibration"
	}
	return o.Redelegate(ctx, r, reason)
}

// reassign asks the coordinator of subnet t to move it from node from to
// node to, for the decision of subnet cause (load balancing).
func (o *Overlay) reassign(ctx context.Context, t subnet.ID, from, to peer.ID, cause subnet.ID) (Delegation, error) {
	req := newMsg(pb.Message_REASSIGN)
	req.Reassign = &pb.Reassign{Snapshot: o.sid[:], Subnet: rangeToPB(o.tree.Range(t)), Node: []byte(from), To: []byte(to),
		Cause: rangeToPB(o.tree.Range(cause))}
	resp, err := o.askCoordinator(ctx, o.coord.rangeShard(t), req, pb.Message_DELEGATION)
	if err != nil {
		return Delegation{}, err
	}
	d, err := o.checkDelegation(resp.GetDelegation().GetRecord(), o.tree.Range(t))
	if err != nil {
		return Delegation{}, err
	}
	o.cache.put(d, false)
	return d, nil
}

// Peers returns the peers that announced themselves to this node (its
// routing table's, the crawlers that heartbeat it as a coordinator, and
// the peers that have it in their routing tables; see announce.go), with
// their declared capacity, load and subnet count.
func (o *Overlay) Peers() []PeerInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]PeerInfo, 0, len(o.peers))
	for _, pi := range o.peers {
		out = append(out, pi)
	}
	slices.SortFunc(out, func(a, b PeerInfo) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

// Between returns the round-trip time between peers a and b as the overlay
// measured it: this node's own latency to a peer is libp2p's peerstore
// EWMA (fed by the DHT's requests and by pings, see announcements); other
// pairs come from the RTTs peers announced to this node (its neighbours,
// see announce.go), which are their peerstore EWMAs (either direction). ok is false when nobody measured the pair. The
// guided search bounds candidates with it (triangle inequality); on the
// emulated Internet, where libp2p's own traffic does not see the world's
// latencies, tests substitute the world's model.
func (o *Overlay) Between(a, b peer.ID) (time.Duration, bool) {
	if a == b {
		return 0, true
	}
	self := o.h.ID()
	if a == self || b == self {
		other := a
		if a == self {
			other = b
		}
		if d := o.h.Peerstore().LatencyEWMA(other); d > 0 {
			return d, true
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if us, ok := o.rtts[a][b]; ok {
		return time.Duration(us) * time.Microsecond, true
	}
	if us, ok := o.rtts[b][a]; ok {
		return time.Duration(us) * time.Microsecond, true
	}
	return 0, false
}

// MeasuredBy returns the round-trip time from peer by to peer of as by
// measured it: this node's peerstore EWMA when by is this node, else the
// RTT by announced to this node (announce.go). Unlike Between it never
// takes of's word: a node can lengthen the RTTs others measure to it, by
// delaying its answers, but not shorten them, while what it announces is
// anything it likes.
func (o *Overlay) MeasuredBy(by, of peer.ID) (time.Duration, bool) {
	if by == of {
		return 0, true
	}
	if by == o.h.ID() {
		if d := o.h.Peerstore().LatencyEWMA(of); d > 0 {
			return d, true
		}
		return 0, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if us, ok := o.rtts[by][of]; ok {
		return time.Duration(us) * time.Microsecond, true
	}
	return 0, false
}

// Invalidate drops the cached delegation of r and of the parts delegated
// apart inside it (for example after its node refused a crawl request), so that
// Resolve asks r's coordinator again for any address in r.
func (o *Overlay) Invalidate(r subnet.Range) { o.cache.invalidate(r) }

// Owned returns the subnets delegated to this node, as last told by its
// coordinators.
func (o *Overlay) Owned() []Delegation {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Delegation, 0, len(o.owned))
	for _, d := range o.owned {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Delegation) int { return a.Subnet.Start.Compare(b.Subnet.Start) })
	return out
}

// Coordinator returns the peer this node currently takes as the coordinator
// of the shard holding subnet id (a DHT lookup when not cached).
func (o *Overlay) Coordinator(ctx context.Context, id subnet.ID) peer.ID {
	return o.coord.closestPeers(ctx, o.coord.rangeShard(id).key(o.sid), false)[0]
}

// Judges reports whether p coordinates or replicates the shard of the
// subnet of address a: one of the peers that judge withholding notices
// about it (a deputy is a replica).
func (o *Overlay) Judges(ctx context.Context, a netip.Addr, p peer.ID) bool {
	c := o.coord
	key := c.rangeShard(o.tree.SmallestNonUnary(a)).key(o.sid)
	return slices.Contains(c.replicaSet(c.closestPeers(ctx, key, false)), p)
}

// askCoordinator sends req to the coordinator of ref, following redirects
// and retrying once with a fresh lookup when the coordinator is gone.
// maxCoordRetries bounds askCoordinator's look-ups after transient
// refusals.
const maxCoordRetries = 3

func (o *Overlay) askCoordinator(ctx context.Context, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, error) {
	return o.askCoordinatorOn(ctx, coordSpec, ref, req, want)
}

// askCoordinatorOn is askCoordinator over the protocol of sp.
func (o *Overlay) askCoordinatorOn(ctx context.Context, sp spec, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, error) {
	resp, _, err := o.askCoordinatorFrom(ctx, sp, ref, req, want)
	return resp, err
}

// askCoordinatorFrom is askCoordinatorOn that also returns the peer whose
// answer it returns: the one that answered, or the last one asked.
func (o *Overlay) askCoordinatorFrom(ctx context.Context, sp spec, ref shardRef, req *pb.Message, want pb.Message_Type) (*pb.Message, peer.ID, error) {
	if o.ctx.Err() != nil {
		return nil, "", ErrClosed
	}
	key := ref.key(o.sid)
	o.mu.Lock()
	target, known := o.coordFor[key]
	o.mu.Unlock()
	if !known {
		// The nearest peer this node knows: a redirect or two from a peer
		// nearer the key costs less than a lookup (tens of DHT requests).
		target = o.coord.view(key)[0]
	}
	var lastErr error
	refreshed := false
	retries := 0 // after a takeover, a lost claim race or an unreachable coordinator
	for hop := 0; hop <= maxNotCoordinator+1+maxCoordRetries; hop++ {
		resp, err := o.askPeer(ctx, sp, target, req, want, retryBudget(ctx, retries < maxCoordRetries))
		if err == nil {
			o.mu.Lock()
			o.coordFor[key] = target
			o.mu.Unlock()
			return resp, target, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return nil, target, err
		}
		switch {
		case errors.Is(err, ErrNotCoordinator) && resp != nil && resp.GetError().GetHint() != nil:
			next, perr := peer.IDFromBytes(resp.GetError().GetHint().GetId())
			if perr != nil || next == target {
				return nil, target, err
			}
			if next == o.h.ID() || !closer(next, target, key) {
				// The peer names this node, or a peer no nearer the key
				// than itself: one of the views is stale. Look again.
				if refreshed {
					return nil, target, err
				}
				refreshed = true
				next = o.coord.closestPeers(ctx, key, true)[0]
			}
			o.stats.redirects.Add(1)
			if addrs := hintAddrs(resp.GetError().GetHint()); len(addrs) > 0 && next != o.h.ID() {
				o.h.Peerstore().AddAddrs(next, addrs, peerstore.TempAddrTTL)
			}
			target = next
		case errors.Is(err, ErrNotCoordinator), errors.Is(err, ErrUnavailable), errors.Is(err, ErrStaleEpoch),
			!isRemote(err):
			// Taken over, no quorum yet, two peers racing to claim the
			// shard (one loses with a stale epoch), or the coordinator is
			// unreachable: look it up again after a pause, a few times
			// (0.1, 0.4, 1.6 s), since these settle within a second or two.
			if retries == maxCoordRetries {
				return nil, target, err
			}
			retries++
			if !isRemote(err) {
				o.coord.forget(target)
				o.mu.Lock()
				if o.coordFor[key] == target {
					delete(o.coordFor, key) // the next request must not start there again
				}
				o.mu.Unlock()
				// Not reached: gone, or only its addresses are (a
				// peer not met for 15 minutes). First ask a reachable
				// peer near the key: a redirect carries the
				// coordinator's addresses, one request where a lookup
				// costs tens.
				if next := o.reachableNear(key, target); retries == 1 && next != "" {
					target = next
					continue
				}
			}
			pause := time.NewTimer(100 * time.Millisecond << (2 * (retries - 1)))
			select {
			case <-ctx.Done():
				pause.Stop()
				return nil, target, err
			case <-pause.C:
			}
			target = o.coord.closestPeers(ctx, key, true)[0]
		default:
			return nil, target, err
		}
	}
	return nil, target, fmt.Errorf("%w: %w", ErrNotCoordinator, lastErr)
}

// reachableNear returns the peer nearest key in this node's view, neither
// this node nor not, that it is connected to or has addresses for; ""
// when none.
func (o *Overlay) reachableNear(key [32]byte, not peer.ID) peer.ID {
	for _, p := range o.coord.view(key) {
		if p == not || p == o.h.ID() {
			continue
		}
		if o.h.Network().Connectedness(p) == network.Connected || len(o.h.Peerstore().Addrs(p)) > 0 {
			return p
		}
	}
	return ""
}

// askPeer sends req to target over sp, or serves it here when target is
// this node, connecting within dial when it is positive (else within
// ctx). An error frame's message is returned with its error.
func (o *Overlay) askPeer(ctx context.Context, sp spec, target peer.ID, req *pb.Message, want pb.Message_Type, dial time.Duration) (*pb.Message, error) {
	if target == o.h.ID() {
		return o.handleLocal(ctx, req)
	}
	o.stats.requests.Add(1)
	if err := o.connect(ctx, target, dial); err != nil {
		return nil, fmt.Errorf("%s to %s: %w", sp.id, target, err)
	}
	return o.request(ctx, target, sp, req, want)
}

// connect connects to p unless connected (a limited, relayed connection
// counts), within the given time when it is positive, else within ctx's.
func (o *Overlay) connect(ctx context.Context, p peer.ID, within time.Duration) error {
	ctx = network.WithAllowLimitedConn(ctx, "micra")
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	return o.h.Connect(ctx, peer.AddrInfo{ID: p})
}

// retryBudget is the time an attempt of askCoordinatorOn may spend
// connecting: half what ctx has left while a retry remains (0: all of
// it). A dial to a departed coordinator waits out whatever deadline it is
// given, and a heartbeat that spent its whole budget there would never
// look up the peer that took the shard over; its crawlers would then stay
// silent to the new coordinator until it orphaned their subnets, one
// liveness timeout after its claim. The request itself keeps the whole
// budget: a decision may take seconds.
func retryBudget(ctx context.Context, retry bool) time.Duration {
	if dl, ok := ctx.Deadline(); ok && retry {
		return max(time.Until(dl)/2, time.Nanosecond)
	}
	return 0
}

// isRemote reports whether err came from the peer's answer rather than from
// reaching it.
func isRemote(err error) bool {
	for _, c := range codeErrors {
		if errors.Is(err, c.err) {
			return true
		}
	}
	return errors.Is(err, ErrRemote)
}

// dispatchTable is the one table of the request/response protocols'
// handlers, by protocol and message type: the streams serve it, and so
// does handleLocal for requests a node addresses to itself. (Replication
// has its own stream handler: its frames are a sequence, not one request.)
func (o *Overlay) dispatchTable() map[protocol.ID]map[pb.Message_Type]handler {
	return map[protocol.ID]map[pb.Message_Type]handler{
		ProbeID: {pb.Message_PROBE: o.handleProbe},
		CoordinateID: {
			pb.Message_RESOLVE:      o.handleResolve,
			pb.Message_DELEGATE:     o.handleDelegate,
			pb.Message_HEARTBEAT:    o.handleHeartbeat,
			pb.Message_REDELEGATE:   o.handleRedelegate,
			pb.Message_ASSIGN:       o.handleAssign,
			pb.Message_ORG_UPDATE:   o.handleOrgUpdate,
			pb.Message_ORG_QUERY:    o.handleOrgQuery,
			pb.Message_REASSIGN:     o.handleReassign,
			pb.Message_BLOCK_UPDATE: o.handleBlockUpdate,
			pb.Message_BLOCK_QUERY:  o.handleBlockQuery,
			pb.Message_SPLIT:        o.handleSplit,
			pb.Message_CARRY:        o.handleCarry,
			pb.Message_CARRY_PROBES: o.handleCarryProbes,
		},
		AuditID: {
			pb.Message_AUDIT:    o.handleAudit,
			pb.Message_REFETCH:  o.handleRefetch,
			pb.Message_WITHHELD: o.handleWithheld,
		},
		ReleaseID: {
			pb.Message_RELEASE_QUERY: o.handleReleaseQuery,
			pb.Message_CHUNK_QUERY:   o.handleChunkQuery,
		},
		AnnounceID: {pb.Message_ANNOUNCE: o.handleAnnounce},
	}
}

// handleLocal serves a coordinate or audit request addressed to this node
// without a stream, from the dispatch table.
func (o *Overlay) handleLocal(ctx context.Context, req *pb.Message) (*pb.Message, error) {
	h, ok := o.handlers[CoordinateID][req.GetType()]
	if !ok {
		h, ok = o.handlers[AuditID][req.GetType()]
	}
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnexpectedType, req.GetType())
	}
	resp, err := h(ctx, o.h.ID(), req)
	if err != nil {
		return errorMsg(err), err
	}
	return resp, nil
}

// Probe asks p to time an HTTP HEAD to url from its own address. A URL on
// a host the Egress policy refuses is refused (ErrForbidden) without
// asking p; p refuses one its own policy or prober refuses likewise, which
// is no failed probe.
func (o *Overlay) Probe(ctx context.Context, p peer.ID, url string) (time.Duration, error) {
	if len(url) > maxURLLen {
		return 0, fmt.Errorf("probe: %w: URL of %d bytes", ErrTooLarge, len(url))
	}
	if err := o.refuseURL(url); err != nil {
		return 0, fmt.Errorf("probe: %w", err)
	}
	if p == o.h.ID() {
		if o.cfg.prober == nil {
			return 0, ErrUnavailable
		}
		return o.localProbe(ctx, url)
	}
	release, err := o.probeSlots.acquire(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("probe by %s: waiting for a stream: %w", p, err)
	}
	defer release()
	req := newMsg(pb.Message_PROBE)
	req.Probe = &pb.Probe{Url: url}
	o.stats.requests.Add(1)
	resp, err := o.request(ctx, p, probeSpec, req, pb.Message_PROBE_RESULT)
	if err != nil {
		return 0, err
	}
	rtt := resp.GetProbeResult().GetRttMicros()
	if rtt < 0 || rtt > int64(time.Hour/time.Microsecond) {
		return 0, fmt.Errorf("probe from %s: %w: RTT %d µs", p, ErrMalformed, rtt)
	}
	return time.Duration(rtt) * time.Microsecond, nil
}
