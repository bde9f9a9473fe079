// Package searcheval measures how well micra's indexer finds what people
// look for: it serves a real site's HTML on loopback, crawls it with micra's
// crawler, stores the records through micra's real path (batches into
// indexer/index), runs known-item queries taken from the site's own
// human-made index (Judgments) and reports success@1, success@10, MRR@10,
// the queries with no result, query latency, index bytes and the result
// ratio, beside the same figures for a full-text reference, PostgreSQL's
// full-text search over the pages' full text, in the same run.
package searcheval
