// Package node is the only package that wires micra together: it opens the
// node's single badger database, builds the libp2p host, DHT and pubsub, the
// crawler and the coordination service, hands each package its parts, and
// shuts them down in order.
//
// Both roles, node and indexer, are built from one assembly (peer.go): it
// opens the data directory (identity.key and the badger database under
// db/), starts the libp2p host (overlay.NewHost), the delegation procedure
// (overlay/delegate) and pubsub, the overlay on the running snapshot with
// the options every peer has (egress policy, bootstrap peers, release
// keys, liveness and withholding), switches it to released snapshots,
// joins, and closes everything in order, each part within a limit.
//
// A Node is built from a Config (defaults, TOML file, MICRA_* environment,
// flags), parsed and checked once (Validate), and Options for what
// embedding programs set (the demo's emulated Internet: its tree, DNS, time
// scale). On the assembly New builds, in order:
//
//   - the results outbox (results), the crawler's Sink;
//   - the crawler, whose Router (requests.Router) keeps a discovered URL
//     when the overlay knows its subnet is delegated here (answered at
//     once) and whose calibration re-delegates a subnet whose pages got
//     slow;
//   - the overlay, with the delegator, a prober that times HTTP HEADs from
//     this node's address through the crawler's fetcher, a refetcher for
//     audits through the crawler, the declared capacity and load, and the
//     probing windows;
//   - the crawl-request handler with its promise policy and the hand-on
//     loop (the crawler's links for other nodes to their owners,
//     delegating unknown subnets in the background), all of the requests
//     package (requests.go wires them), and the dashboard with /metrics.
//
// Everything a peer can ask of the node exists before the overlay answers
// peers, so no handler waits for the node to be built.
//
// StartIndexer builds the other role, an indexer (IndexerConfig), on its
// own assembly: the overlay (it coordinates shards like any peer but does
// not crawl: overlay.NoCrawl) and the indexer (the indexer package) with
// the index and the search page and API.
//
// Join connects to the bootstrap peers and claims the node's own subnet;
// Close stops everything in the reverse order of dependence (dashboard,
// crawler, outbox, overlay, host, database), so that the crawler's last
// batches reach the outbox and nothing stored is lost; an indexer's Close
// stops its HTTP API, indexer, overlay, host, index and database.
//
// node may import overlay, requests, results, indexer, crawl, bootstrap and subnet; nothing of
// micra's imports node except cmd/micra and the rigs under internal/.
package node
