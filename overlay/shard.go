package overlay

import (
	"crypto/sha256"
	"fmt"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Shard key domain tags: a range shard and an organisation shard can never
// share a key, whatever their contents.
const (
	rangeShardTag = "micra/shard/range/v1\x00"
	orgShardTag   = "micra/shard/org/v1\x00"
	blockShardTag = "micra/shard/block/v1\x00"
)

// shardRef names a shard: the subtree under an anchor range, the index of
// one organisation's delegated ranges, or the index of the decisions under
// a range above the anchors (a block).
type shardRef struct {
	kind   pb.ShardRef_Kind
	anchor subnet.Range // RANGE, BLOCK
	org    string       // ORG
}

func (s shardRef) String() string {
	switch s.kind {
	case pb.ShardRef_ORG:
		return "org:" + s.org
	case pb.ShardRef_BLOCK:
		return "block:" + s.anchor.String()
	}
	return "range:" + s.anchor.String()
}

// key returns SHA-256(tag | snapshot id | anchor start16 | anchor end16) for
// a range or block shard and SHA-256(tag | snapshot id | organisation key)
// for an organisation shard, each kind with its own tag. The shard's coordinator is the live peer closest to it
// in Kademlia's XOR metric.
func (s shardRef) key(sid subnet.SnapshotID) [32]byte {
	h := sha256.New()
	switch s.kind {
	case pb.ShardRef_ORG:
		h.Write([]byte(orgShardTag))
		h.Write(sid[:])
		h.Write([]byte(s.org))
	case pb.ShardRef_BLOCK:
		h.Write([]byte(blockShardTag))
		h.Write(sid[:])
		h.Write(rangeKey(s.anchor))
	default:
		h.Write([]byte(rangeShardTag))
		h.Write(sid[:])
		h.Write(rangeKey(s.anchor))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (s shardRef) toPB() *pb.ShardRef {
	r := &pb.ShardRef{Kind: s.kind}
	if s.kind == pb.ShardRef_ORG {
		r.Org = s.org
	} else {
		r.Anchor = rangeToPB(s.anchor)
	}
	return r
}

// shardRefFromPB decodes a wire shard reference and checks it names a shard
// of tree: an anchor range of the tree that is an anchor under the anchor
// rule, an organisation the tree knows, or a range of the tree with
// children (a block; requests check it lies above the anchor concerned).
func (c *coordinator) shardRefFromPB(p *pb.ShardRef) (shardRef, error) {
	switch p.GetKind() {
	case pb.ShardRef_RANGE:
		r, err := rangeFromPB(p.GetAnchor())
		if err != nil {
			return shardRef{}, fmt.Errorf("%w: shard anchor: %v", ErrMalformed, err)
		}
		id, ok := c.tree.Find(r)
		if !ok || c.anchorOf(id) != id {
			return shardRef{}, fmt.Errorf("%w: %s is not a shard anchor of this snapshot", ErrNotFound, r)
		}
		return shardRef{kind: pb.ShardRef_RANGE, anchor: r}, nil
	case pb.ShardRef_ORG:
		if p.GetOrg() == "" || len(p.GetOrg()) > 256 || len(c.tree.ByOrg(p.GetOrg())) == 0 {
			return shardRef{}, fmt.Errorf("%w: organisation shard not in this snapshot", ErrNotFound)
		}
		return shardRef{kind: pb.ShardRef_ORG, org: p.GetOrg()}, nil
	case pb.ShardRef_BLOCK:
		r, err := rangeFromPB(p.GetAnchor())
		if err != nil {
			return shardRef{}, fmt.Errorf("%w: block: %v", ErrMalformed, err)
		}
		id, ok := c.tree.Find(r)
		if !ok || !hasChildren(c.tree, id) {
			return shardRef{}, fmt.Errorf("%w: %s is not a block of this snapshot", ErrNotFound, r)
		}
		return shardRef{kind: pb.ShardRef_BLOCK, anchor: r}, nil
	}
	return shardRef{}, fmt.Errorf("%w: shard kind %d", ErrMalformed, p.GetKind())
}

// AllocationDepth is the anchor depth used when a subnet has no
// registry-allocation ancestor: in trees built from IANA's file and the
// RIRs' statistics, allocations sit at depth 2, under IANA's blocks at
// depth 1.
const AllocationDepth = 2

// anchorOf returns the anchor of the shard that coordinates id.
//
// With an explicit anchor depth d, it is id's ancestor at depth d (id
// itself when id is shallower). By default it is the allocation level: the
// shallowest ancestor of id (id included) whose layer is LayerRIR, i.e. the
// range a registry allocated or assigned; when the chain has no such range
// (addresses outside any allocation, or a tree built without registry
// statistics) it falls back to the ancestor at AllocationDepth. Both rules
// depend only on the chain from the root, so every subnet of one shard
// finds the same anchor on every peer holding the same snapshot.
func (c *coordinator) anchorOf(id subnet.ID) subnet.ID {
	return anchorIn(c.tree, c.cfg.anchorDepth, id)
}

// anchorIn is anchorOf in tree t with the fixed anchor depth depth (0: the
// allocation level).
func anchorIn(t *subnet.Tree, depth int, id subnet.ID) subnet.ID {
	if depth > 0 {
		for t.Depth(id) > depth {
			id = t.Parent(id)
		}
		return id
	}
	var rir, fallback subnet.ID = subnet.None, subnet.None
	for n := id; n != subnet.None; n = t.Parent(n) {
		if t.Layer(n) == subnet.LayerRIR {
			rir = n
		}
		if t.Depth(n) == AllocationDepth || (fallback == subnet.None && t.Depth(n) < AllocationDepth) {
			fallback = n
		}
	}
	if rir != subnet.None {
		return rir
	}
	return fallback
}

// rangeShard returns the shard coordinating subnet id.
func (c *coordinator) rangeShard(id subnet.ID) shardRef {
	return shardRef{kind: pb.ShardRef_RANGE, anchor: c.tree.Range(c.anchorOf(id))}
}

func orgShard(org string) shardRef { return shardRef{kind: pb.ShardRef_ORG, org: org} }

// blockShard returns the block shard of range x.
func (c *coordinator) blockShard(x subnet.ID) shardRef {
	return shardRef{kind: pb.ShardRef_BLOCK, anchor: c.tree.Range(x)}
}

// above reports whether x is a strict ancestor of id.
func (c *coordinator) above(x, id subnet.ID) bool {
	for n := c.tree.Parent(id); n != subnet.None; n = c.tree.Parent(n) {
		if n == x {
			return true
		}
	}
	return false
}

// blocksOf returns the blocks a decision for subnet id is indexed in,
// nearest first: the parent of id's shard anchor (every decision under it:
// the neighbourhood's probes) and every higher ancestor x that the
// bottom-up search looks into from below for id, i.e. id at most two
// levels under x (the paper's siblings and their children).
func (c *coordinator) blocksOf(id subnet.ID) []subnet.ID {
	t := c.tree
	a := c.anchorOf(id)
	var out []subnet.ID
	for x := t.Parent(a); x != subnet.None; x = t.Parent(x) {
		if x == t.Parent(a) || t.Depth(id) <= t.Depth(x)+2 {
			out = append(out, x)
		}
	}
	return out
}

func hasChildren(t *subnet.Tree, id subnet.ID) bool {
	for range t.Children(id) {
		return true
	}
	return false
}
