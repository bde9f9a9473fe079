// Package subnet owns micra's IP-address hierarchy: the tree of address
// ranges built from Regional Internet Registry data (the IANA file, the
// RIRs' delegated and delegated-extended statistics, RPSL inetnum/inet6num
// objects and, as an optional deeper layer, IP-to-ASN tables), its compact
// snapshot encoding whose content hash is the snapshot id that overlay peers
// compare, and the pure functions over it that the rest of micra shares:
// lookups (smallest range, smallest non-unary range, parent, children,
// siblings, depth, ranges of one organisation) and the propagation of
// delegations from an old snapshot to a new one (IPMicra thesis 7.5.3).
//
// subnet is a leaf: it imports nothing of micra's but the leaf
// internal/codec (its snapshot's binary encoding) and never libp2p, so the
// overlay, the benchmark baselines and unit tests all run the same code.
// Everything it reads is untrusted; parsers report malformed input with
// file:line and never panic.
package subnet
