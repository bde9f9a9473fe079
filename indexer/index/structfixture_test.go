package index

import (
	"time"

	"github.com/micra-net/micra/crawl"
)

const (
	rdfType   = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
	xsdDate   = "http://www.w3.org/2001/XMLSchema#date"
	schemaOrg = crawl.SchemaOrg
)

func iriT(v string) crawl.Term   { return crawl.Term{Kind: crawl.TermIRI, Value: v} }
func blankT(v string) crawl.Term { return crawl.Term{Kind: crawl.TermBlank, Value: v} }
func litT(v string) crawl.Term   { return crawl.Term{Kind: crawl.TermLiteral, Value: v} }
func st(s, p, o crawl.Term) crawl.Statement {
	return crawl.Statement{S: s, P: p, O: o}
}

// structuredPages are records with statements: a recipe by Alice Smith, an
// event, a product, and a page without any. The v1 index fixture
// (testdata/index-v1.backup) holds them as the schema 1 index stored them.
func structuredPages(at time.Time) []crawl.Record {
	recipe := page("https://food.example/garlic-soup", "Garlic soup", at, "garlic", 65535, "soup", 40000)
	recipe.Statements = []crawl.Statement{
		st(blankT("b0"), iriT(rdfType), iriT(schemaOrg+"Recipe")),
		st(blankT("b0"), iriT(schemaOrg+"name"), litT("Garlic soup")),
		st(blankT("b0"), iriT(schemaOrg+"recipeIngredient"), litT("garlic")),
		st(blankT("b0"), iriT(schemaOrg+"author"), blankT("b1")),
		st(blankT("b1"), iriT(rdfType), iriT(schemaOrg+"Person")),
		st(blankT("b1"), iriT(schemaOrg+"name"), litT("Alice Smith")),
		st(blankT("b0"), iriT(schemaOrg+"description"), crawl.Term{Kind: crawl.TermLiteral, Value: "Une soupe \"à l'ail\"\nchaude\\", Lang: "fr"}),
	}
	bread := page("https://food.example/bread", "Garlic bread", at, "garlic", 50000, "bread", 65535)
	bread.Statements = []crawl.Statement{
		st(iriT("https://food.example/bread#it"), iriT(rdfType), iriT(schemaOrg+"Recipe")),
		st(iriT("https://food.example/bread#it"), iriT(schemaOrg+"author"), litT("Bob")),
	}
	event := page("https://events.example/concert", "Concert in the park", at, "concert", 65535, "park", 30000)
	event.Statements = []crawl.Statement{
		st(blankT("b0"), iriT(rdfType), iriT(schemaOrg+"Event")),
		st(blankT("b0"), iriT(schemaOrg+"name"), litT("Concert in the park")),
		st(blankT("b0"), iriT(schemaOrg+"startDate"), crawl.Term{Kind: crawl.TermLiteral, Value: "2026-06-01", Datatype: xsdDate}),
	}
	product := page("https://shop.example/pan", "Garlic press", at, "garlic", 20000, "press", 65535)
	product.Statements = []crawl.Statement{
		st(blankT("b0"), iriT(rdfType), iriT(schemaOrg+"Product")),
		st(blankT("b0"), iriT(schemaOrg+"offers"), blankT("b1")),
		st(blankT("b1"), iriT(rdfType), iriT(schemaOrg+"Offer")),
		st(blankT("b1"), iriT(schemaOrg+"price"), litT("10")),
		st(blankT("b1"), iriT(schemaOrg+"availability"), iriT(schemaOrg+"InStock")),
	}
	plain := page("https://plain.example/garlic", "All about garlic", at, "garlic", 65535, "history", 30000)
	return []crawl.Record{recipe, bread, event, product, plain}
}
