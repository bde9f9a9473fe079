// Package results carries crawl results from volunteers to indexers: the
// node's persistent outbox, the signed result batch envelope, the result
// and indexer topics, and the acknowledgement protocol. The indexer
// package is the receiving end; URLs travel the other way in the requests
// package.
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
// Indexers (the indexer package) announce themselves on TopicIndexers
// (the shards they take, their addresses, a lifetime of three
// announcement intervals; IndexerAnnouncement). This is the one place
// micra learns of indexers: the overlay knows them only as peers that do
// not crawl (overlay.NoCrawl). Nodes count acknowledgements only from
// announced indexers (or, with TrustedIndexers, from those listed) and dial
// them, since a node publishes to result topics it does not subscribe to
// through connected subscribers only. kad-dht provider records would be
// the other way to find indexers, but overlay.New builds its DHT with
// providers disabled; announcements also carry the shards, which a
// provider record cannot. An indexer joins the result topics with
// JoinTopic (the validator: OpenEnvelope), verifies what it takes against
// the signed header and acknowledges it with SendAck.
//
// results imports overlay, crawl, subnet, internal/p2pstream,
// internal/check and libp2p; it must not import requests, indexer, node or
// cmd (results/pb imports requests/pb: a pending crawl stored by an
// indexer holds a crawl request).
package results
