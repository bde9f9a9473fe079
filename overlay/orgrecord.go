package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// Organisation index records: the coordinator of an organisation shard
// publishes, under OrgKey, a signed ORG_INDEX record listing which subnets
// of the organisation are delegated to whom, stamped with the shard's epoch
// and write sequence number. Any node reads it back (OrgDelegations) when
// the shard's coordinator cannot be reached. The DHT's validator keeps the
// newest record by (epoch, seq), so a deposed coordinator's record loses to
// its successor's; a reader also checks that the writer is plausibly the
// shard's coordinator (see plausible), since any key can sign a record.
//
// Bounds: a record lists at most maxOrgEntries subnets (under maxRecordSize
// bytes); a node publishes at most maxOrgPutsPerRound records per round of
// the configured interval, one put at a time, each within orgPutTimeout.
const (
	maxOrgPutsPerRound = 4
	orgPutTimeout      = 30 * time.Second // a put is a closest-peers lookup and up to 20 stores
)

// orgChanged marks the organisation index of sh for publication in the next
// round.
func (c *coordinator) orgChanged(sh *shard) {
	if sh.ref.kind != pb.ShardRef_ORG {
		return
	}
	sh.mu.Lock()
	sh.orgDirty = true
	sh.mu.Unlock()
}

// publishOrgs runs one publication round: the organisation shards this node
// coordinates whose index changed, or was last published more than the
// refresh interval ago, oldest first, at most maxOrgPutsPerRound of them.
func (c *coordinator) publishOrgs(ctx context.Context) {
	if !c.cfg.publishOrgs {
		return
	}
	now := time.Now()
	type candidate struct {
		sh   *shard
		last time.Time
	}
	var due []candidate
	for _, sh := range c.heldShards() {
		if sh.ref.kind != pb.ShardRef_ORG {
			continue
		}
		sh.mu.Lock()
		if sh.owned && (sh.orgDirty || now.Sub(sh.orgPublished) >= c.cfg.orgRefresh) {
			due = append(due, candidate{sh, sh.orgPublished})
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(due, func(a, b candidate) int { return a.last.Compare(b.last) })
	for _, cd := range due[:min(len(due), maxOrgPutsPerRound)] {
		sh := cd.sh
		if ctx.Err() != nil {
			return
		}
		sh.mu.Lock()
		sh.orgDirty = false // a change during the put marks it again
		sh.mu.Unlock()
		err := c.putOrgRecord(ctx, sh)
		sh.mu.Lock()
		if err != nil {
			sh.orgDirty = true // retried next round
		} else {
			sh.orgPublished = now
		}
		sh.mu.Unlock()
		if err != nil {
			c.log.Debug("publishing organisation record failed", "org", sh.ref.org, "error", err)
		}
	}
}

func (c *coordinator) putOrgRecord(ctx context.Context, sh *shard) error {
	sr, err := c.orgRecord(sh)
	if err != nil {
		return err
	}
	v, err := proto.Marshal(sr)
	if err != nil {
		return fmt.Errorf("marshalling organisation record: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, orgPutTimeout)
	defer cancel()
	c.o.stats.puts.Add(1)
	return c.o.dht.PutValue(pctx, OrgKey(c.sid, sh.ref.org), v)
}

// orgRecord builds and signs the organisation index of sh, which this node
// must coordinate: its non-orphaned delegations in range order, at most
// maxOrgEntries.
func (c *coordinator) orgRecord(sh *shard) (*pb.SignedRecord, error) {
	sh.mu.Lock()
	owned, epoch, seq := sh.owned, sh.meta.GetEpoch(), sh.meta.GetSeq()
	sh.mu.Unlock()
	if !owned {
		return nil, fmt.Errorf("%w: organisation shard %s", ErrNotCoordinator, sh.ref.org)
	}
	var entries []*pb.OrgEntry
	err := c.st.scan(sh.key, pb.Entry_ORG, func(e *pb.Entry) bool {
		d, err := c.entryDelegation(e)
		if err != nil || d.Orphaned || d.Org != sh.ref.org {
			return true
		}
		entries = append(entries, &pb.OrgEntry{Subnet: rangeToPB(d.Subnet), Node: []byte(d.Node)})
		return len(entries) < maxOrgEntries
	})
	if err != nil {
		return nil, err
	}
	// The store scans in key order, the range key; the validator insists.
	slices.SortFunc(entries, func(a, b *pb.OrgEntry) int { return compareRangePB(a.GetSubnet(), b.GetSubnet()) })
	entries = slices.CompactFunc(entries, func(a, b *pb.OrgEntry) bool { return compareRangePB(a.GetSubnet(), b.GetSubnet()) == 0 })
	r := &pb.Record{
		Kind: pb.Record_ORG_INDEX, Snapshot: c.sid[:], Org: sh.ref.org,
		Epoch: epoch, Seq: seq, DecidedMs: time.Now().UnixMilli(), OrgEntries: entries,
	}
	sr, err := signRecord(c.sk, r)
	if err != nil {
		return nil, err
	}
	if len(sr.GetRecord()) > maxRecordSize {
		return nil, fmt.Errorf("organisation record: %w: %d bytes", ErrTooLarge, len(sr.GetRecord()))
	}
	return sr, nil
}

// compareRangePB orders wire ranges by their 32-byte range key.
func compareRangePB(a, b *pb.Range) int {
	if c := slices.Compare(a.GetStart(), b.GetStart()); c != 0 {
		return c
	}
	return slices.Compare(a.GetEnd(), b.GetEnd())
}

// orgFromDHT reads the organisation index of org from the DHT: the newest
// valid record written by a peer plausibly coordinating the organisation
// shard. It watches every better value the search finds rather than only
// the last: a record signed by a peer far from the shard key is skipped,
// so a forged record with a high epoch does not hide the genuine one when
// the search meets both. The delegations it returns carry the index
// record's writer, epoch, sequence number and time, not each decision's.
func (o *Overlay) orgFromDHT(ctx context.Context, org string) ([]Delegation, error) {
	key := OrgKey(o.sid, org)
	o.stats.lookups.Add(1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := o.dht.SearchValue(sctx, key)
	if err != nil {
		return nil, fmt.Errorf("organisation record: %w", err)
	}
	var best *pb.Record
	var lastErr error = routing.ErrNotFound
	for v := range ch { // the search emits each better value once; bounded by the DHT's lookup
		rec, err := o.orgValidator.open(key, v)
		if err != nil {
			lastErr = err
			continue
		}
		writer, _ := peer.IDFromBytes(rec.GetWriter())
		if !o.coord.plausible(ctx, orgShard(org).key(o.sid), writer) {
			lastErr = fmt.Errorf("%w: organisation record written by %s, not a plausible coordinator", ErrBadRecord, writer)
			continue
		}
		if best == nil || newer(rec, best) {
			best = rec
		}
	}
	if best == nil {
		return nil, fmt.Errorf("organisation record: %w", lastErr)
	}
	writer, _ := peer.IDFromBytes(best.GetWriter())
	out := make([]Delegation, 0, len(best.GetOrgEntries()))
	for _, e := range best.GetOrgEntries() {
		rg, _ := rangeFromPB(e.GetSubnet()) // checked by the validator
		node, _ := peer.IDFromBytes(e.GetNode())
		out = append(out, Delegation{
			Subnet: rg, Org: org, Node: node, Writer: writer,
			Epoch: best.GetEpoch(), Seq: best.GetSeq(), Decided: time.UnixMilli(best.GetDecidedMs()),
		})
	}
	return out, nil
}

// plausibleWriter reports whether the writer of a verified record may
// coordinate the record's shard as far as this node's routing table can
// tell: the writer is this node, or among the 2×replication peers the
// table knows nearest to the shard key, or nearer than the last of them.
// The shard's coordinator is the live peer nearest to the key, so it always
// passes; a key far from the shard, which any Sybil can sign with, does
// not. With fewer peers known than that, every writer passes. DHT peers run
// it on every record they store or return (RecordValidator), so a forged
// record with a high epoch cannot displace the coordinator's.
func (c *coordinator) plausibleWriter(r *pb.Record) bool {
	writer, err := peer.IDFromBytes(r.GetWriter())
	if err != nil {
		return false
	}
	if writer == c.self {
		return true
	}
	var key [32]byte
	switch r.GetKind() {
	case pb.Record_DELEGATION:
		rg, _ := rangeFromPB(r.GetSubnet())
		id, ok := c.tree.Find(rg)
		if !ok {
			return false
		}
		key = c.rangeShard(id).key(c.sid)
	case pb.Record_ORG_INDEX:
		key = orgShard(r.GetOrg()).key(c.sid)
	default:
		return false
	}
	n := 2 * c.cfg.replication
	known := c.o.dht.RoutingTable().NearestPeers(kb.ConvertKey(string(key[:])), n)
	if len(known) < n || slices.Contains(known, writer) {
		return true
	}
	return kb.Closer(writer, known[len(known)-1], string(key[:]))
}

// orgFallback reports whether OrgDelegations should fall back on the DHT
// record after err from the organisation shard's coordinator: not when the
// caller gave up, this overlay is closing, or the network does not publish
// the records (PublishRecords: every peer runs the same setting).
func (o *Overlay) orgFallback(ctx context.Context, err error) bool {
	return err != nil && o.cfg.publishOrgs && ctx.Err() == nil && o.ctx.Err() == nil && !errors.Is(err, ErrClosed)
}
