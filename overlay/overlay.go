package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// Per-peer budgets of audit and refetch requests (auditserve.go), and of
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
	rtts       map[peer.ID]announcedRTTs        // announced peers' measured RTTs to others (announce.go)
	rttEntries int                              // RTTs over all of rtts, bounded by maxRTTEntries (rttrow.go)
	pulled     map[peer.ID]time.Time            // when this node last asked a peer for its row (rowWanted)
	told       map[peer.ID]told                 // announcements exchanged, by peer, bounded
	pingMu     sync.Mutex                       // guards pings alone: ownRTT runs under mu
	pings      map[peer.ID]pinged               // least ping RTTs to known peers (pingrtt.go)
	newPings   chan peer.ID                     // peers queued for their first ping (queueNewPing)
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
	o = newOverlay(h, sk, tree, db, cfg)
	netCtx, netCancel := context.WithCancel(context.Background())
	o.netCancel = netCancel
	defer func() {
		if err != nil {
			err = errors.Join(err, o.Close())
		}
	}()
	writerChk := new(atomic.Pointer[writerCheck])
	if o.dht, err = dht.New(netCtx, h, o.dhtOptions(writerChk)...); err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	if err := o.joinPubSub(netCtx); err != nil {
		return nil, err
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
	if err := o.startLoops(); err != nil {
		return nil, err
	}
	return o, nil
}

// newOverlay makes the overlay's state, with its lifetime context: no
// network, no goroutine.
func newOverlay(h host.Host, sk crypto.PrivKey, tree *subnet.Tree, db *badger.DB, cfg config) *Overlay {
	o := &Overlay{
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
		rtts:          map[peer.ID]announcedRTTs{},
		pulled:        map[peer.ID]time.Time{},
		told:          map[peer.ID]told{},
		pings:         map[peer.ID]pinged{},
		newPings:      make(chan peer.ID, newPingQueue),
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
	return o
}

// dhtOptions are the options of the overlay's DHT: micra's record
// validators (the writer check, set once the coordinator exists, in
// writerChk), the routing table's diversity filter, and its refresh and
// concurrency.
func (o *Overlay) dhtOptions(writerChk *atomic.Pointer[writerCheck]) []dht.Option {
	h, cfg := o.h, o.cfg
	validators := record.NamespacedValidator{"pk": record.PublicKeyValidator{}}
	for ns, v := range newRecordValidators(o.tree, writerChk) {
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
	return dopts
}

// joinPubSub takes the pubsub router it was given, or starts its own
// until netCtx ends, and joins the release topic when the node has
// release keys (without them every release would be refused: the node
// neither joins the topic nor looks for releases), loading the releases
// it stored.
func (o *Overlay) joinPubSub(netCtx context.Context) (err error) {
	if o.ps = o.cfg.ps; o.ps == nil {
		if o.ps, err = NewPubSub(netCtx, o.h, o.cfg.log); err != nil {
			return err
		}
	}
	if len(o.cfg.releaseKeys) == 0 {
		return nil
	}
	if err := o.ps.RegisterTopicValidator(TopicRelease, o.validateRelease); err != nil {
		return err
	}
	if o.releases, err = o.ps.Join(TopicRelease); err != nil {
		return err
	}
	return o.loadReleases()
}

// startLoops starts the overlay's goroutines, each until Close: reading
// and looking for releases (with release keys), watching reachability and
// the host's addresses, the coordinator's notifier, refresher and
// convictions, asking again for delegations, and the periodic maintenance,
// heartbeats, announcements and organisation records.
func (o *Overlay) startLoops() error {
	if o.releases != nil {
		rsub, err := o.releases.Subscribe(pubsub.WithBufferSize(8))
		if err != nil {
			return err
		}
		o.wg.Go(func() { o.readReleases(rsub) })
		o.wg.Go(o.releaseLoop)
	}
	bus := o.h.EventBus()
	rsubReach, err := bus.Subscribe(new(event.EvtLocalReachabilityChanged))
	if err != nil {
		return fmt.Errorf("reachability events: %w", err)
	}
	o.wg.Go(func() { o.watchReachability(rsubReach) })
	rsubAddrs, err := bus.Subscribe(new(event.EvtLocalAddressesUpdated))
	if err != nil {
		return fmt.Errorf("address events: %w", err)
	}
	o.wg.Go(func() { o.refreshLoop(rsubAddrs) })
	o.wg.Go(func() { o.coord.notifier(o.ctx) })
	o.wg.Go(func() { o.coord.refresher(o.ctx) })
	o.wg.Go(o.askAgainLoop)
	o.wg.Go(func() { o.coord.convictionLoop(o.ctx) })
	o.wg.Go(func() { o.every(o.cfg.maintain, o.coord.maintain) })
	o.wg.Go(func() { o.every(o.cfg.heartbeat, o.heartbeatAll) })
	o.wg.Go(o.announceLoop)
	o.wg.Go(o.pingNewLoop)
	o.wg.Go(func() { o.every(o.cfg.orgPublish, o.coord.publishOrgs) })
	return nil
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
