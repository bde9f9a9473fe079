package subnet

import (
	"encoding/hex"
	"iter"
	"net/netip"
	"slices"
	"strings"
)

// ID identifies a node of one Tree. IDs are dense, in preorder, and only
// meaningful for the tree that returned them. The two roots (the whole IPv4
// and the whole IPv6 space) are nodes too.
type ID int32

// None is the ID returned when there is no such node (the parent of a root).
const None ID = -1

// Layer says which kind of source a node came from. Layers are ordered from
// the most structural (IANA's blocks) to the most derived (routing data); on
// overlaps the more structural layer wins, so a node's parent is never of a
// less structural layer than the node (see Builder.Build).
type Layer uint8

// Layers, in precedence order. Values are append-only: they are stored in
// snapshots.
const (
	LayerRoot Layer = iota // the whole address space of a family
	LayerIANA              // IANA's blocks to the registries
	LayerRIR               // RIR delegated and delegated-extended statistics
	LayerRPSL              // RPSL inetnum/inet6num objects
	LayerASN               // IP-to-ASN tables (routed ranges with their organisation)
	numLayers
)

var layerNames = [numLayers]string{"root", "iana", "rir", "rpsl", "asn"}

// String returns the layer's lowercase name.
func (l Layer) String() string {
	if l < numLayers {
		return layerNames[l]
	}
	return "layer(" + string(rune('0'+l)) + ")"
}

// SnapshotID is the content hash of a tree: SHA-256 over its canonical
// encoding (the ranges and their attributes, not build metadata). Two peers
// cooperate on delegations only under the same snapshot id.
type SnapshotID [32]byte

// String returns the id in lowercase hex.
func (s SnapshotID) String() string { return hex.EncodeToString(s[:]) }

// Short returns the first 12 hex digits of the id, for logs and displays.
func (s SnapshotID) Short() string { return s.String()[:12] }

// Node is a copy of one node's data.
type Node struct {
	ID       ID
	Range    Range
	Depth    int    // 0 for a root
	Org      string // organisation key, empty when the source names none
	OrgName  string // display name of the organisation when known
	Country  string // ISO 3166 alpha-2 as published (may be "", "ZZ", "EU", "AP")
	Registry string // "iana", "afrinic", "apnic", "arin", "lacnic", "ripencc", "ietf", ...
	Status   string // allocated, assigned, available, reserved, or the RPSL status
	ASN      uint32 // origin AS for LayerASN nodes, 0 otherwise
	Layer    Layer
}

// attr is the compact per-node attribute record.
type attr struct {
	org    int32 // index into Tree.orgs, -1 for none
	asn    uint32
	cc     [2]byte
	reg    uint8 // index into Tree.registries
	status uint8 // index into Tree.statuses
	layer  Layer
}

// org is one organisation: its key and, when known, its display name.
type org struct{ key, name string }

// Tree is an immutable IP-address hierarchy. It is safe for concurrent use
// by any number of goroutines.
//
// Nodes are stored in preorder sorted by (start ascending, end descending,
// layer ascending), so a node's subtree is the contiguous block of IDs that
// follows it and lookups are a binary search plus a short walk up.
type Tree struct {
	id   SnapshotID
	meta Meta

	n4     int     // nodes [0,n4) are IPv4 with root 0; [n4,len) IPv6 with root n4
	start  []key   // per node
	end    []key   // per node
	parent []int32 // per node; -1 for roots
	next   []int32 // per node; the ID after its subtree
	depth  []uint8 // per node
	attrs  []attr  // per node

	orgs       []org // sorted by key
	registries []string
	statuses   []string
	orgOff     []int32 // CSR: nodes of org i are orgNodes[orgOff[i]:orgOff[i+1]]
	orgNodes   []int32

	// v4Index[b] is the first IPv4 node whose start is ≥ b<<16, so that a
	// lookup only searches the nodes starting in the address's /16.
	v4Index []int32
}

// ID returns the tree's snapshot id.
func (t *Tree) ID() SnapshotID { return t.id }

// Meta returns the build metadata stored with the tree.
func (t *Tree) Meta() Meta { return t.meta }

// Len returns the number of nodes, including the two roots.
func (t *Tree) Len() int { return len(t.start) }

// Root returns the root of the family of a (IPv4 when a is IPv4 or
// IPv4-mapped, IPv6 otherwise).
func (t *Tree) Root(is4 bool) ID {
	if is4 {
		return 0
	}
	return ID(t.n4)
}

func (t *Tree) bounds(is4 bool) (lo, hi int) {
	if is4 {
		return 0, t.n4
	}
	return t.n4, len(t.start)
}

func (t *Tree) valid(id ID) bool { return id >= 0 && int(id) < len(t.start) }

// Lookup returns the smallest range containing a. Every address has one,
// since the roots cover their whole family. It returns None only for an
// invalid address.
func (t *Tree) Lookup(a netip.Addr) ID {
	if !a.IsValid() {
		return None
	}
	a = a.Unmap()
	k := keyOf(a)
	lo, hi := t.bounds(a.Is4())
	if a.Is4() {
		// Every node before v4Index[b] starts before k's /16 block.
		b := k.lo >> 16
		lo, hi = int(t.v4Index[b]), int(t.v4Index[b+1])
	}
	// Find the last node in [lo,hi) whose start is ≤ k; lo-1 if none.
	i, j := lo, hi
	for i < j {
		h := int(uint(i+j) >> 1)
		if !k.less(t.start[h]) { // start[h] ≤ k
			i = h + 1
		} else {
			j = h
		}
	}
	n := int32(i - 1) // a node: the root starts at the family's zero and is in block 0
	// The deepest range containing k is n or one of its ancestors: any node
	// after it in preorder starts beyond k.
	for t.end[n].less(k) {
		n = t.parent[n]
	}
	return ID(n)
}

// SmallestNonUnary returns the smallest range containing a that holds more
// than one address: the subnet IPMicra delegates (thesis 7.6.1).
func (t *Tree) SmallestNonUnary(a netip.Addr) ID {
	id := t.Lookup(a)
	for id != None && t.start[id] == t.end[id] {
		id = ID(t.parent[id])
	}
	return id
}

// Chain returns the path from the root of a's family down to the smallest
// range containing a.
func (t *Tree) Chain(a netip.Addr) []ID {
	id := t.Lookup(a)
	if id == None {
		return nil
	}
	chain := make([]ID, 0, int(t.depth[id])+1)
	for ; id != None; id = ID(t.parent[id]) {
		chain = append(chain, id)
	}
	slices.Reverse(chain)
	return chain
}

// Find returns the node whose range is exactly r.
func (t *Tree) Find(r Range) (ID, bool) {
	if !r.Valid() {
		return None, false
	}
	id := t.Lookup(r.Start)
	e := keyOf(r.End)
	s := keyOf(r.Start)
	// Every node on the way up contains r.Start; the first that also reaches
	// r.End is either r itself or strictly larger, and so are all above it.
	for ; id != None; id = ID(t.parent[id]) {
		if t.start[id] == s && t.end[id] == e {
			return id, true
		}
		if !t.end[id].less(e) {
			return None, false
		}
	}
	return None, false
}

// Range returns the address range of id.
func (t *Tree) Range(id ID) Range {
	is4 := int(id) < t.n4
	return Range{Start: t.start[id].addr(is4), End: t.end[id].addr(is4)}
}

// Parent returns the parent of id, or None for a root.
func (t *Tree) Parent(id ID) ID { return ID(t.parent[id]) }

// Depth returns the depth of id: 0 for a root.
func (t *Tree) Depth(id ID) int { return int(t.depth[id]) }

// Layer returns the source layer of id.
func (t *Tree) Layer(id ID) Layer { return t.attrs[id].layer }

// IsUnary reports whether id's range holds exactly one address.
func (t *Tree) IsUnary(id ID) bool { return t.start[id] == t.end[id] }

// Children returns the children of id in address order.
func (t *Tree) Children(id ID) iter.Seq[ID] {
	return func(yield func(ID) bool) {
		end := t.next[id]
		for c := int32(id) + 1; c < end; c = t.next[c] {
			if !yield(ID(c)) {
				return
			}
		}
	}
}

// NumChildren returns the number of children of id.
func (t *Tree) NumChildren(id ID) int {
	n := 0
	for range t.Children(id) {
		n++
	}
	return n
}

// Siblings returns the other children of id's parent, in address order.
// A root has no siblings.
func (t *Tree) Siblings(id ID) iter.Seq[ID] {
	return func(yield func(ID) bool) {
		p := t.parent[id]
		if p < 0 {
			return
		}
		for c := range t.Children(ID(p)) {
			if c != id && !yield(c) {
				return
			}
		}
	}
}

// Subtree returns id and all its descendants in preorder.
func (t *Tree) Subtree(id ID) iter.Seq[ID] {
	return func(yield func(ID) bool) {
		for i := int32(id); i < t.next[id]; i++ {
			if !yield(ID(i)) {
				return
			}
		}
	}
}

// All returns every node of the tree in preorder: the IPv4 root and its
// subtree, then the IPv6 root and its subtree.
func (t *Tree) All() iter.Seq[ID] {
	return func(yield func(ID) bool) {
		for i := range t.start {
			if !yield(ID(i)) {
				return
			}
		}
	}
}

// Org returns the organisation key of id, or "" when it has none.
func (t *Tree) Org(id ID) string {
	if o := t.attrs[id].org; o >= 0 {
		return t.orgs[o].key
	}
	return ""
}

// Country returns the registry country of id: its own, or that of the
// nearest ancestor that names one, leaving out the codes that name no
// country ("ZZ", "EU", "AP"); "" when none does. Ranges of the IP-to-ASN
// layer name no country and inherit their allocation's.
func (t *Tree) Country(id ID) string {
	for x := id; t.valid(x); x = t.Parent(x) {
		switch cc := t.attrs[x].cc; cc {
		case [2]byte{}, [2]byte{'Z', 'Z'}, [2]byte{'E', 'U'}, [2]byte{'A', 'P'}:
		default:
			return string(cc[:])
		}
	}
	return ""
}

// OrgName returns the display name of an organisation key, or "" when the
// sources named none.
func (t *Tree) OrgName(key string) string {
	if i, ok := t.orgIndex(key); ok {
		return t.orgs[i].name
	}
	return ""
}

func (t *Tree) orgIndex(key string) (int, bool) {
	return slices.BinarySearchFunc(t.orgs, key, func(o org, k string) int { return strings.Compare(o.key, k) })
}

// ByOrg returns all ranges whose organisation key is key, in preorder. The
// returned slice is fresh.
func (t *Tree) ByOrg(key string) []ID {
	i, ok := t.orgIndex(key)
	if !ok || key == "" {
		return nil
	}
	ids := make([]ID, 0, t.orgOff[i+1]-t.orgOff[i])
	for _, n := range t.orgNodes[t.orgOff[i]:t.orgOff[i+1]] {
		ids = append(ids, ID(n))
	}
	return ids
}

// NumOrgs returns the number of distinct organisation keys.
func (t *Tree) NumOrgs() int { return len(t.orgs) }

// Node returns a copy of id's data.
func (t *Tree) Node(id ID) Node {
	a := t.attrs[id]
	n := Node{
		ID:       id,
		Range:    t.Range(id),
		Depth:    int(t.depth[id]),
		Registry: t.registries[a.reg],
		Status:   t.statuses[a.status],
		ASN:      a.asn,
		Layer:    a.layer,
	}
	if a.cc != [2]byte{} {
		n.Country = string(a.cc[:])
	}
	if a.org >= 0 {
		n.Org = t.orgs[a.org].key
		n.OrgName = t.orgs[a.org].name
	}
	return n
}

// finish computes the derived per-node arrays (parent, next, depth) and the
// organisation index from start, end and attrs, and checks that the nodes
// form a laminar family in preorder. It is shared by the builder and the
// snapshot decoder.
func (t *Tree) finish() error {
	n := len(t.start)
	t.parent = make([]int32, n)
	t.next = make([]int32, n)
	t.depth = make([]uint8, n)
	if err := t.link(0, t.n4, true); err != nil {
		return err
	}
	if err := t.link(t.n4, n, false); err != nil {
		return err
	}
	t.v4Index = make([]int32, 1<<16+1)
	for b, i := 0, 0; b <= 1<<16; b++ {
		for i < t.n4 && t.start[i].lo < uint64(b)<<16 {
			i++
		}
		t.v4Index[b] = int32(i)
	}
	// Organisation index, by counting sort.
	t.orgOff = make([]int32, len(t.orgs)+1)
	for i := range t.attrs {
		if o := t.attrs[i].org; o >= 0 {
			t.orgOff[o+1]++
		}
	}
	for i := 1; i < len(t.orgOff); i++ {
		t.orgOff[i] += t.orgOff[i-1]
	}
	t.orgNodes = make([]int32, t.orgOff[len(t.orgOff)-1])
	fill := slices.Clone(t.orgOff[:len(t.orgs)])
	for i := range t.attrs {
		if o := t.attrs[i].org; o >= 0 {
			t.orgNodes[fill[o]] = int32(i)
			fill[o]++
		}
	}
	return nil
}

// maxDepth bounds the hierarchy's depth; real data stays far below it.
const maxDepth = 255

// link computes parent, next and depth for one family's nodes [lo,hi) and
// verifies the preorder: the first node is the root covering the family, and
// every other node either nests in the open node before it or starts after
// it ends.
func (t *Tree) link(lo, hi int, is4 bool) error {
	if hi <= lo {
		return errCorrupt("missing root")
	}
	if !t.start[lo].isZero() || t.end[lo] != maxKey(is4) {
		return errCorrupt("root does not cover the address family")
	}
	stack := make([]int32, 0, 16)
	t.parent[lo] = -1
	stack = append(stack, int32(lo))
	for i := lo + 1; i < hi; i++ {
		s, e := t.start[i], t.end[i]
		if e.less(s) || maxKey(is4).less(e) {
			return errCorrupt("range ends before it starts or beyond the family")
		}
		prev := t.start[i-1]
		if s.less(prev) || (s == prev && t.end[i-1].less(e)) {
			return errCorrupt("ranges out of order")
		}
		if s == prev && t.end[i-1] == e {
			return errCorrupt("duplicate range")
		}
		for t.end[stack[len(stack)-1]].less(s) {
			top := stack[len(stack)-1]
			t.next[top] = int32(i)
			stack = stack[:len(stack)-1]
		}
		p := stack[len(stack)-1]
		if t.end[p].less(e) {
			return errCorrupt("ranges overlap without nesting")
		}
		if len(stack) >= maxDepth {
			return errCorrupt("hierarchy deeper than 255")
		}
		t.parent[i] = p
		t.depth[i] = uint8(len(stack))
		stack = append(stack, int32(i))
	}
	for _, top := range stack {
		t.next[top] = int32(hi)
	}
	return nil
}
