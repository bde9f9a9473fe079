package structured

import (
	"strconv"
	"time"
)

// FeedItem is one item of an RSS 2.0 or Atom feed, as the caller's feed
// parser read it.
type FeedItem struct {
	Link        string // the item's link (or its id, when that is an http URL)
	Title       string
	Description string // text, markup removed
	Date        time.Time
}

// FeedWriter writes the channel and items of an RSS 2.0 or Atom feed in
// the RSS 1.0 vocabulary, as the same feed in RSS 1.0 (RDF/XML) gives
// them: the channel (the feed document's URL) is an rss:channel whose
// rss:items is an rdf:Seq of the items; an item is an rss:item, its
// subject is its link (a blank node if it has none), with rss:title,
// rss:link, rss:description and dc:date (xsd:dateTime, UTC).
type FeedWriter struct {
	x       *Extractor
	channel Term
	seq     Term
	n       int
}

// Feed returns a writer for the feed document at the Extractor's base.
func (x *Extractor) Feed() *FeedWriter {
	ch, ok := x.iri(x.Base())
	if !ok {
		ch = x.blank()
	}
	return &FeedWriter{x: x, channel: ch}
}

var (
	rdfTypeTerm = Term{Kind: IRI, Value: RDFType}
	rssTitle    = Term{Kind: IRI, Value: RSS + "title"}
	rssLink     = Term{Kind: IRI, Value: RSS + "link"}
)

// Item writes one item.
func (w *FeedWriter) Item(it FeedItem) {
	x := w.x
	if !x.source() {
		return
	}
	if w.n == 0 {
		x.emit(w.channel, rdfTypeTerm, Term{Kind: IRI, Value: RSS + "channel"})
		w.seq = x.blank()
		x.emit(w.channel, Term{Kind: IRI, Value: RSS + "items"}, w.seq)
		x.emit(w.seq, rdfTypeTerm, Term{Kind: IRI, Value: RDF + "Seq"})
	}
	w.n++
	subj, ok := x.iri(it.Link)
	if !ok {
		subj = x.blank()
	}
	x.emit(w.seq, Term{Kind: IRI, Value: RDF + "_" + strconv.Itoa(w.n)}, subj)
	x.emit(subj, rdfTypeTerm, Term{Kind: IRI, Value: RSS + "item"})
	if it.Title != "" {
		x.emit(subj, rssTitle, x.literal(it.Title, "", ""))
	}
	if ok {
		x.emit(subj, rssLink, x.literal(subj.Value, "", ""))
	}
	if it.Description != "" {
		x.emit(subj, Term{Kind: IRI, Value: RSS + "description"}, x.literal(it.Description, "", ""))
	}
	if !it.Date.IsZero() {
		x.emit(subj, Term{Kind: IRI, Value: DC + "date"}, x.literal(it.Date.UTC().Format(time.RFC3339), XSD+"dateTime", ""))
	}
}

// Close writes the channel's title and link, when it had items.
func (w *FeedWriter) Close(title, link string) {
	if w.n == 0 {
		return
	}
	if title != "" {
		w.x.emit(w.channel, rssTitle, w.x.literal(title, "", ""))
	}
	if l, ok := w.x.iri(link); ok {
		w.x.emit(w.channel, rssLink, w.x.literal(l.Value, "", ""))
	}
}
