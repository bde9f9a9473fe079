// Package crawl is micra's crawler: a plain library, in the manner of colly,
// that fetches pages politely from the subnets delegated to its node, turns
// them into compact keyword records and keeps every URL it discovers for
// another node's subnet until the node has handed it to the subnet's owner.
//
// crawl imports nothing of micra's but the leaf packages egress (the one
// classifier of special-purpose addresses, which the overlay and results
// share) and internal/codec (the binary encoding of its stored values and
// records) and never libp2p; node wires it to the overlay through the small
// interfaces this package declares: Router (is a URL known to be this
// node's? answered at once, never over the network), optionally a
// Disowner (which addresses are no longer this node's?) and Sink (record
// batches out), and through the outgoing store (Outgoing, Handed, Keep:
// URLs for other nodes out).
//
// # Pipeline
//
// New starts a Crawler over a *badger.DB owned by the node. Requests enter
// through Submit (seeds: WebRACE's runtime crawl requests {Link,
// ParentLink, Depth, Owners}), through Promise (requests of other nodes,
// each answered with a receipt: only those the crawler can fetch within a
// horizon) and through link extraction. They pass, with bounded queues between the stages so that a
// slow stage holds back the ones before it:
//
//   - frontier: per-host queues persisted under KeyPrefix, ordered by hops
//     from the request and an in-link importance estimate; a ready index
//     orders hosts by when politeness allows them next; the URL-seen test is
//     a Bloom filter in RAM in front of the exact set on disk; the links of
//     a page enter in one batch; a host's stored state marks requests
//     leased for fetching, so that opening the frontier after a crash
//     makes such a host ready after its politeness delay instead of at
//     the lease's expiry;
//   - fetch: robots.txt (RFC 9309, cached ≤ 24 h; its Sitemap lines become
//     link sources), one connection and a minimum delay per host and per
//     server address (HostConnections and Politeness change them, for
//     benchmarks and one's own sites only), Crawl-delay up to a cap,
//     429/503 Retry-After, conditional GET, same-host redirects (≤ 5) to
//     URLs not seen before (the hops of a chain enter the seen set, so a
//     redirect loop is followed once), response headers up to
//     MaxHeaderBytes (64 KiB). A response whose headers pass it, whose
//     Content-Encoding is unknown, or whose body is not what its
//     Content-Encoding says is dropped at once (counted in
//     Stats.FetchErrors and Stats.Dropped): the same request would get
//     the same bytes, and no browser would show them either;
//   - detect and transform: HTML, XHTML, RSS, Atom, RDF/XML, sitemaps and
//     plain text are parsed, sitemaps and feeds also when served as gzip
//     files (sitemap.xml.gz), and documents of those types whose bytes are
//     gzip with no Content-Encoding saying so (identity or none: a
//     misconfigured or doubly compressing server), both unpacked up to the
//     decoded-size cap; other types are recorded, not parsed. Text is
//     decoded as WHATWG says (BOM, header, meta, guess); invalid UTF-8
//     becomes U+FFFD, as in a browser, so a record's texts are always
//     valid UTF-8, whatever the page's bytes or declared charset. The
//     page's structured data (JSON-LD, microdata, RDFa, RDF/XML, feed
//     items; StructuredData, on by default) becomes its record's
//     Statements in one normal form: absolute IRIs, schema.org as
//     https://schema.org/, blank nodes b0, b1, … per record, literals
//     with a datatype or a language, feed items in the RSS 1.0
//     vocabulary; at most 1000 per page, malformed blocks skipped and
//     counted (Stats.StructuredMalformed), no remote context ever
//     fetched. The IRIs they name feed the frontier like anchors;
//   - index: the page's whole vocabulary as weighted stemmed keywords
//     (title, headings and definition terms weighing more; identifiers
//     such as DEFAULT_AUTO_FIELD or os.path.join also joined into one
//     word), at most MaxKeywords, SimHash, change detection that
//     ignores counters, dates and link order (and sees a change of the
//     statements): only new, modified and gone pages produce a Record;
//   - route: links are normalised (WHATWG, session ids and fragments
//     removed); same-host links are queued, others are resolved and given to
//     the Router, and the ones it does not keep are stored in the outgoing
//     store with the page's completion, with the address they resolved to,
//     until the node reports them Handed (acknowledged by their owner) or
//     Keep (found to be this node's after all). The store is bounded
//     (OutgoingCap); links beyond it are dropped and counted. A queued
//     request whose address the Disowner disowns (its subnet went to
//     another node since it was queued) is not fetched: the dispatcher
//     moves it from its queue into the outgoing store in one transaction
//     (Stats.HandedOff), or leaves it queued while the store is full; Keep
//     queues such a request again although its URL was seen.
//
// Records are batched by size and age, compressed with zstd and handed to
// Sink.Results; DecodeBatch reads them back for indexers. A fetched request
// leaves its host's queue only when it is processed, in the transaction
// that stores the page's new state and its record, and the record stays in
// the DB until the sink has taken its batch: a crash at any point fetches
// the page again or re-sends its record (at least once), never loses it. Stats has the
// counters and the queue sizes a dashboard shows. Revisits are
// scheduled per page from its observed change rate. Work happens only
// inside the operator's Windows and Bandwidth caps; outside them the
// crawler holds its state.
//
// # Egress safety
//
// Fetcher, also usable alone for probes, refuses loopback, private,
// link-local, CGNAT, multicast, documentation, IPv6 local and metadata
// addresses (package egress) and every port but 80 and 443, on the resolved
// address at dial time, so redirects and DNS rebinding cannot reach them.
// AllowPrivateNetworks lifts this for the emulated Internet and tests.
//
// # Delegation support
//
// Three small pieces serve IPMicra's delegation, which the node wires to
// the overlay: Fetcher.Probe times HTTP HEADs from the node's address (the
// least of a few, each on a fresh connection and timed from the start of
// its connect, so that it reads one RTT both on a real network and on the
// emulated Internet, and a delay only lengthens it); Calibrator keeps
// each page's recent fetch RTTs (Timing.RTT) and signals a page whose
// fetches became slower than its history, on consecutive fetches, which
// the node turns into a re-delegation of the server's subnet (the
// Calibration option feeds it every fetch); Schedule (and
// Crawler.NextOpen) lets probes wait for the operator's windows.
// Crawler.Refetch fetches one page afresh as the crawler would (politeness,
// robots.txt, egress guard, caps) and analyses it with the same pipeline,
// for audits of other nodes' records (FingerprintDistance compares).
//
// # Storage
//
// All keys live under KeyPrefix and are built in keys.go, whose comment
// shows the layout. Values use a compact, versioned binary encoding whose
// decoders are fuzzed. BadgerOptions are the badger settings the node
// opens its database with, sized for the crawler's memory budget.
package crawl
