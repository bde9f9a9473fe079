// Package results carries crawl results from volunteers to indexers: the
// node's persistent outbox, the result batch envelope, the indexer that
// verifies, stores and acknowledges batches, and crawl requests from
// indexers (or any client) to the nodes owning the requested subnets.
//
// # Node side
//
// Outbox is the crawler's crawl.Sink. Each batch the crawler seals is cut
// by result shard (ShardOf the record's host; one shard by default), and
// each shard's batch gets the next sequence number and a Header (node id,
// sequence number, snapshot id, creation time, shard, record count, size,
// SHA-256 of each part) signed with the node's libp2p key. It is written to
// badger before Results returns; only then is it published on the shard's
// topic (Topic), cut into parts that fit the pubsub message limit. A batch
// leaves the outbox once Acks distinct known indexers have acknowledged it
// over the acknowledgement protocol (AckID, served by the outbox), naming
// it by (node, sequence number, SHA-256 of the header). Unacknowledged
// batches are published again with exponential backoff, but only while an
// indexer that takes their shard is announced: with no indexer online a
// volunteer uploads nothing, and a batch waits, stored, until one
// announces itself, which triggers its publication at once. Publishing is
// paced (a window of unacknowledged batches and a minimum gap), as
// GossipSub drops messages beyond a peer's queue. At OutboxCap, Results
// blocks, which pauses the crawler, with a warning, until acknowledgements
// make room; nothing is dropped. Sequence numbers never repeat: the counter
// is stored with each batch and starts from the clock in microseconds, so
// even a wiped database does not reuse one. The outbox, its acknowledgement
// state and the indexers heard of survive restarts.
//
// # Indexers
//
// An Indexer announces itself on TopicIndexers (the shards it takes, its
// addresses, a lifetime of three announcement intervals). Nodes count
// acknowledgements only from announced indexers (or, with TrustedIndexers,
// from those listed) and dial them, since a node publishes to result
// topics it does not subscribe to through connected subscribers only.
// kad-dht provider records would be the other way to find indexers, but
// overlay.New builds its DHT with providers disabled; announcements also
// carry the shards, which a provider record cannot.
//
// The indexer subscribes to the topics of the shards it takes. Each
// message is verified by the topic validator before pubsub delivers or
// relays it (OpenEnvelope: schema, sizes, the signature by the key of the
// node the header names, the hash of the part), then against the
// indexer's snapshot ids, shard layout and shard. Parts are gathered in
// bounded memory. The replay table (badger, with a TTL of ReplayWindow)
// maps each stored (node, sequence number) to its digest: the same digest
// again is a replay or a re-announcement, acknowledged again without
// storing; another digest is a conflict (the node signed two batches with
// one number), refused and logged. A new batch is decompressed with
// crawl.DecodeBatch's caps, checked against its header (record count,
// every record in the header's shard), stored with index.Put (the records
// PutBatch would store; the batch is decoded once), recorded in the replay
// table and only then acknowledged.
//
// # Audits
//
// After storing a batch the indexer samples its records (Audits: a share,
// 2 % by default, by a keyed hash the nodes cannot predict; every record
// of a node with a disagreement on file; within an hourly budget per
// node) and has each audited by the coordinator of its subnet
// (overlay.Audit) with the whole signed batch as evidence (OpenEvidence is
// what coordinators verify it with) and the node's earlier disputed
// records as priors. A verdict naming the node convicted flags it for
// FlagFor: index.Distrust leaves its records out of search, and the
// tallies, kept in badger, are served at /api/audits (Audited). The queue
// and the evidence it holds are bounded; a full queue drops the sample.
//
// # Crawl requests
//
// Submit sends seed URLs with a depth to the nodes owning their subnets
// (overlay Resolve, or Delegate for a subnet not delegated yet) over
// CrawlID; SendCrawl sends requests to one known owner (a node hands its
// crawler's links on with it); ServeCrawlRequests is the node's handler,
// which hands them to the crawler. CrawlID is the one URL-delivery
// protocol: nothing sends the overlay's older ForwardID any more.
// An indexer keeps the crawl requests it submits (Indexer.Submit) until a
// record of the page arrives, and submits them again, to the subnet's
// owner of the moment, when none came within CrawlPatience (doubling, up to
// its attempts; a failed delivery does not count): a node that dies for
// good takes the URLs queued in its frontier with it.
//
// results imports overlay, crawl, crawl/index, subnet and libp2p; it must
// not import node or cmd.
package results
