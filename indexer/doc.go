// Package indexer is the receiving end of micra's results: it takes the
// signed result batches volunteers publish (the results package), verifies
// and stores their records in an indexer/index Index, acknowledges them to
// their nodes, has a share of them audited by the coordinators of their
// subnets, keeps the crawl requests it submits until their pages are
// indexed, and serves search and its counters over HTTP (Handler).
//
// # Ingest
//
// The indexer subscribes to the topics of the shards it takes. Each
// message is verified by the topic validator before pubsub delivers or
// relays it (results.OpenEnvelope: schema, sizes, the signature by the key of the
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
// (overlay.Audit) with the whole signed batch as evidence (results.OpenEvidence is
// what coordinators verify it with) and the node's earlier disputed
// records as priors. A verdict naming the node convicted flags it for
// FlagFor: index.Distrust leaves its records out of search, and the
// tallies, kept in badger, are served at /api/audits (Audited). The queue
// and the evidence it holds are bounded; a full queue drops the sample.
//
// # Crawl requests
//
// An indexer keeps the crawl requests it submits (Indexer.Submit, over
// requests.Submit) until a record of the page arrives, and submits them
// again, to the subnet's owner of the moment, when none came within
// CrawlPatience (doubling, up to its attempts; a failed delivery does not
// count): a node that dies for good takes the URLs queued in its frontier
// with it. A request that went to a live node and is overdue makes the
// indexer tell the coordinator of the page's subnet that the node withheld
// it (overlay.Withheld, withheld.go; WithheldNotices): after the
// coordinator's grace and an auditor's fetch of the page the subnet moves,
// and the request is submitted to its new node at once.
//
// # Storage
//
// The indexer's keys (the replay table, audit tallies, pending crawl
// requests, withholding notices owed) live in the results package's badger namespace, laid out in
// results.Prefix's doc comment, and share its schema. Pending requests and
// notices owed are each a durable retry queue (queue.go): items under one
// prefix, due at a time they carry, taken in rounds by one loop each.
//
// indexer imports results, overlay, crawl, indexer/index, subnet,
// internal/check and libp2p; only node and the rigs under internal/ import
// it.
package indexer
