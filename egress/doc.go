// Package egress decides which network destinations micra may contact. It
// classifies IP addresses against the IANA special-purpose address
// registries (RFC 6890 and successors: loopback, private, link-local,
// CGNAT, documentation, benchmarking, multicast, reserved, unique local
// and the rest) and checks ports, so that no volunteer can be steered at
// its own machine, its LAN or a cloud metadata service.
//
// It is micra's one classifier, used at every place an address enters:
// the crawler's dial-time guard (crawl: on the resolved address, so that a
// link, a redirect or DNS rebinding cannot slip past it), the overlay,
// which neither delegates nor probes a special-purpose address and refuses
// such requests from peers, and the crawl requests and seeds of results.
// A Policy value is the per-node setting; its zero value refuses every
// special-purpose address, and AllowPrivate (the node's
// allow_private_networks, for the emulated Internet on 127/8) or Allow
// prefixes lift it.
//
// egress is a leaf: it imports nothing of micra's and never libp2p, so
// that crawl, a plain library, can use it as well as overlay and results.
// Everything here is pure and safe for concurrent use.
package egress
