// Package structured is the transform step of MultiCrawler's pipeline for
// the structured data a page publishes: JSON-LD blocks, microdata, RDFa
// (Lite and the parts of RDFa 1.1 Core pages use), RDF/XML documents and
// feed items all become statements (subject, predicate, object) in one
// normal form:
//
//   - subjects are absolute IRIs or blank nodes, predicates absolute IRIs,
//     objects IRIs, blank nodes or literals with a datatype or a language;
//   - relative IRIs are resolved against the page's base;
//   - every schema.org IRI (http or https, with or without www) is written
//     in one form, https://schema.org/ (SchemaOrg);
//   - blank nodes are labelled b0, b1, … per page, in order of first use;
//   - literals of type xsd:string and rdf:langString carry no datatype;
//   - feed items of RSS 2.0 and Atom are written in the RSS 1.0 vocabulary
//     (RDF Site Summary, itself RDF), as an RSS 1.0 feed parsed as RDF/XML
//     gives them.
//
// Every input is untrusted: statements per page, literal and IRI lengths,
// JSON-LD block sizes and nesting depths are bounded (Limits), a malformed
// block or item is skipped and counted, and no input makes the extraction
// panic or run for longer than its size justifies. JSON-LD is processed by
// github.com/piprate/json-gold with a document loader that never touches
// the network: it answers the schema.org context from a copy embedded
// here and refuses every other remote context.
//
// The package imports nothing of micra's; the HTML and XML walks that feed
// it are crawl/internal/parse's. An Extractor is for one page and is not
// safe for concurrent use; the package's functions are.
package structured
