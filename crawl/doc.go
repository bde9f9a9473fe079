// Package crawl is micra's crawler: a plain library, in the manner of colly,
// that fetches pages politely from the subnets delegated to its node, turns
// them into compact keyword records and reports every URL it discovers so
// that the node can forward it to the owner of its subnet.
//
// crawl imports nothing of micra's and never libp2p; node wires it to the
// overlay through the small interfaces this package declares.
package crawl
