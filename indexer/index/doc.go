// Package index is micra's indexer storage and search engine: a plain
// library that stores the keyword records volunteers publish (crawl.Record),
// keeps an inverted index over them and over their structured data
// (statements), answers ranked keyword and typed queries, matches records
// against registered user profiles (eRACE's URDs) and exports everything as
// JSON Lines, the statements also as N-Triples. Handler serves any Store
// over HTTP: a JSON API and a small HTML search page.
//
// There are two stores with one contract (Store): Index, embedded in the
// node's badger database (what follows describes it), and Postgres, the
// same semantics in PostgreSQL tables that several indexers may share
// (pg*.go; docs/postgres.md). Both share everything above the storage:
// record preparation, the query language, scoring, hits, profiles'
// relevance and the exports.
//
// It imports crawl only (its records, batches and text processing), never
// libp2p nor any other package of micra. Verifying batches (signatures, sequence numbers,
// replays), pubsub and acknowledgements belong to the caller: it verifies a
// batch, calls PutBatch (or Put) with the batch's Source, and acknowledges
// when that returns nil.
//
// # Storage
//
// New takes the node's *badger.DB; all keys live under KeyPrefix and are
// built in keys.go, whose comment shows the layout. A page is identified by
// the URL the crawler requested (already normalised by it). Storing is
// idempotent and independent of delivery order: a record replaces the
// stored version of its page only if it is newer (record time, then content
// hash as a deterministic tie-break), the same record delivered twice is
// stored once, and a ChangeGone record removes the page from search but
// leaves a tombstone, so that an older record arriving late cannot bring
// the page back. Each page keeps the provenance of its current version
// (node, batch sequence, time received). Every change of one record, its
// postings, document frequencies, counters and profile annotations, is one
// badger transaction, so the index is consistent after a crash.
//
// Everything is bounded: records (encoded size, keywords, links, title,
// statements; times at most ClockSkew in the future), queries (bytes, terms, page size,
// result window, postings visited) and profiles (count, keywords).
// Malformed keywords are dropped; records with a bad URL, time, status or
// change kind are rejected and counted.
//
// # Index and ranking
//
// A record is indexed under its keywords (by default up to 4096: a page's
// whole vocabulary), with the crawler's weights (heaviest keyword = 65535,
// already sub-linear in repetition and with title, heading and position
// multipliers applied by the crawler; quantised to multiples of 257 as
// records carry them, crawl.QuantiseWeight), plus the
// stems of its title (flagged) and of its host name labels without "www"
// and the top-level domain (flagged), which are added with the record's
// lowest keyword weight when they are not keywords. Postings are keyed by
// term and then by page id (a 128-bit hash of the URL), so one term's
// postings are one sorted, contiguous key range; a separate key holds each
// term's document frequency.
//
// Query words, profile keywords and titles go through the crawler's own
// textproc pipeline (tokeniser, English stop words, Snowball stemmer, length
// bounds, identifiers joined), so "Running" finds pages whose keyword is
// "run" and "DEFAULT_AUTO_FIELD" pages that write it whole. Words are ANDed
// by default (Query.Any for OR); "-word" excludes pages with word ("--word"
// is a word, a command-line option; a query of exclusions alone searches
// for them). An all-words query that no page matches whole, without
// statement conditions, is answered with the pages that have some of its
// words, each score scaled by the square of the share of the words the page
// has, and says so (Results.Partial). A query word no page has is split in
// two words pages have when it can be ("noaliases" searches "aliases",
// split.go; Results.Split). A query whose words all drop out of the
// pipeline ("if", "GET", "-v", "\d") searches them as written among the
// verbatim terms of titles and anchors (schema 5, verbatim.go). There are
// no phrases: records hold no positions. AND queries are evaluated by a
// leapfrog join driven by the rarest term, OR queries by a merge of all
// lists, exclusions by seeks; Results.Total is exact unless MaxScan stopped
// the query, when it is extrapolated from the share of the id space read.
//
// # Queries of frequent words
//
// A join reads every posting of its rarest term, and at 100,000 pages an
// AND of common words, or a partial match that merges them, reads tens of
// thousands. Terms on at least 1024 pages therefore keep their postings
// twice more.
//
// Posting blocks (schema 6; blocks.go): the postings in id order, packed
// in blocks of 1024, each block one badger key, beside a delta of one key
// per posting changed since the blocks were written (in the same
// transaction as the posting). When the delta holds more than an eighth
// of the term's pages (at least 1024 changes, at most 2048) the term is
// packed again, as a new generation. A generation never changes, so the
// blocks read are kept in memory for the next queries (BlockCache, 128 MiB
// by default); a cursor reads them merged with the delta, and seeks by
// galloping and binary search. A join of three words on most of 100,000
// pages reads a few hundred thousand postings from memory instead of from
// badger, a key each.
//
// Impact lists (schema 4; impact.go): the postings ordered by impact, what
// the posting adds to a score per unit of idf, one empty key per posting
// holding its exact impact, written in the same transaction as the
// posting, and built whole when a term reaches the threshold. A query of
// one to three words that have such lists (or fewer than 1024 pages,
// sorted in memory), whose join would read at least 1024 postings and
// whose words go together often enough (an eighth of the rarest word's
// pages have the others, were they independent), runs the threshold
// algorithm on them (threshold.go): it reads the lists heaviest first,
// scores each page it meets by looking up its postings (in the term's
// blocks and delta, read whole at the first lookup), and stops when its
// k-th best page scores more than any page it has not met can. Its hits
// are the join's, exactly, in the same order. Counting every match is the
// join it avoids, so its Results.Total is estimated from a join of the
// first 1024 postings (Results.Estimated); one word's total is its
// document frequency. When it would score more pages than an eighth of
// the join's postings, the join answers after all (Stats.ImpactFallbacks).
//
// A partial match of at most three words is found by subsets (subsets.go):
// each proper subset of the words is an all-words query, most promising
// first, until the k-th best page found beats what any subset left can
// give.
//
// The score of page d for query terms Q is
//
//	score(d) = Σ_{t ∈ Q ∩ d} idf(t) · (w(t,d)/65535 · (1 + TitleBoost·[t in d's title]) + a(t,d)/65535)
//	idf(t)   = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
//
// where w is the posting weight, a the weight of the anchors of links to d
// with t (below), N the searchable pages and df(t) the pages with t (the
// BM25 idf, positive for every df). The crawler's weights are already
// normalised per page (the heaviest term of every page weighs 1), so they
// play the role of BM25's saturated, length-normalised term frequency, and
// a page matching more of an OR query's terms scores higher. Ties are
// broken by page id, so paging is stable.
//
// # Anchor text
//
// Only the indexer sees every link, so it describes each page by the
// words of the links other pages make to it (schema 3; anchors.go): per
// page, the number of live linking pages per anchor term (at most 256
// terms; a page's links to itself left out; a record's first 200 links,
// 8 words of each), of which the 32 most frequent are merged into the
// page's postings with a(t,d) = 16384 · (1 + ln n), at most 65535, for n
// linking pages. A term only anchors give is a posting of own weight 0:
// "frobnicate" finds the page every other page links to as
// "frobnicate()" even if the page never writes it. Counts change with
// the linking records in their transactions, so the index is the same
// whatever order records arrive in (while no page has more than 256
// distinct anchor terms). New migrates a schema 2 index by counting the
// stored records' anchors, resumably.
//
// # Why a custom index over badger rather than a search library
//
// The records are already analysed: each is a short list of stemmed,
// weighted keywords. A maintained library such as bleve (or bluge) would
// need its own storage (bleve's default scorch index writes its own segment
// files; its older upsidedown index runs over a key-value interface whose
// stores are BoltDB and an in-memory treap, with goleveldb, RocksDB and moss
// adapters in blevex: none is badger), so the node would hold two databases
// whose contents can diverge on a crash, and idempotent storing,
// tombstones, provenance and profile annotations would still have to live
// in badger beside it; it analyses text itself and derives term frequencies
// from it, while here the weights come from the crawler and would have to
// be smuggled in as per-term boosts; and it brings dozens of modules. What
// the indexer needs, postings with given weights, document frequencies,
// AND/OR/NOT over sorted lists, top-k and postings walks for profile back
// fill, is a few hundred lines over badger, inside the same transactions as
// the records, and is checked against a brute-force scan in the tests. It
// does not do phrase queries, fuzzy matching or spelling correction.
//
// # Structured data
//
// A record's statements (crawl.Statement: the page's JSON-LD, microdata,
// RDFa, RDF/XML and feed items as RDF triples) are stored with it, at most
// MaxStatements (1000), those N-Triples cannot write dropped and counted
// (relative or malformed IRIs, literal subjects, bad language tags). They
// are indexed as hidden terms, which start with '#' as no keyword can:
// "#t:" and a type IRI for each rdf:type, "#p:" and "PROPERTY=VALUE" for
// each property's whole normalised value and each of its word stems (an
// item's schema:name standing for the item), lower case, at most 256 a
// page (structured.go). A typed query is then a posting-list intersection
// like keywords, with the same ranking:
//
//	type:Recipe garlic            schema.org's Recipe (bare names are schema.org's), with "garlic"
//	type:schema:Event -type:Event prefixed names (schema, rdf, rdfs, dc, foaf, og …) and <IRI>s
//	author=alice                  a property whose value, or whose item's name, has the word
//	author="alice smith"          several words, each required
//	schema:price=10               a value that is not words (numbers, dates, IRIs) is matched whole
//
// Hits carry the page's types and a few statements. The index schema is
// version 2; New migrates a version 1 index, whose records may hold
// statements that were stored but not indexed.
//
// # Profiles
//
// A profile (eRACE URD) is a name, weighted keywords as the user types them
// and a relevance threshold in [0, 1]. Keywords are stemmed like queries.
// The relevance of a record to a profile is the profile-weighted mean of
// the record's normalised weights of the profile's terms,
//
//	rel(d, P) = Σ_{t ∈ P} W(t) · w(t,d)/65535 / Σ_{t ∈ P} W(t)
//
// independent of the rest of the index, so that an annotation, once made,
// does not drift. Every stored record is matched against the profiles that
// share a term with it; those with rel > 0 and rel ≥ threshold get an
// annotation (eRACE's ACI: relevance and matched terms) kept per (profile,
// page) and ordered by relevance. Registering or changing a profile
// rebuilds its annotations from the postings of its terms; a rebuild or
// deletion interrupted by a crash is finished by New.
//
// # Export
//
// Export writes every searchable record with its provenance and statements
// as JSON Lines (JSONRecord documents the stable field names) from one
// snapshot; ExportNTriples writes all pages' statements as one RDF graph
// in N-Triples, blank nodes made unique per page.
package index
