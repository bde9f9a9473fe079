package requests

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/micra-net/micra/overlay"
)

// The stream protocols of URL delivery.
const (
	// CrawlID: crawl requests (seed URLs with a depth, WebRACE's full
	// request) to the node that owns their subnet, answered with its
	// receipts.
	CrawlID protocol.ID = "/micra/crawl/1.0.0"

	// WatchID: links handed on, with their owners' receipts, to an indexer.
	WatchID protocol.ID = "/micra/watch/1.0.0"
)

// Wire version of pb.CrawlMessage.
const wireVersion = 1

// MaxCrawlRequests is the most crawl requests one CRAWL frame carries.
const MaxCrawlRequests = 256

// Bounds of watches.
const (
	// MaxWatches is the most watches one WATCH frame carries.
	MaxWatches = 64
	// MaxWatchAge is how old a watch's receipt may be when an indexer
	// takes it.
	MaxWatchAge = time.Hour
)

// Sizes and counts accepted from the network.
const (
	clockSkew = 10 * time.Minute // how far a receipt's time may be from this peer's clock

	maxCrawlMsg    = 1 << 20                                            // a crawl request frame: up to MaxCrawlRequests of ≤ 2 KiB URLs
	maxCrawlAck    = MaxCrawlRequests*(overlay.MaxReceiptSig+4) + 1<<10 // its answer: a receipt a request
	maxURLLen      = 2048
	maxOwners      = 16
	maxOwnerLen    = 256
	maxDepth       = 64
	crawlDeadline  = 10 * time.Second // the handler only queues the requests
	svcCrawl       = "micra.crawl"
	crawlStreamMem = 2 * maxCrawlMsg

	maxWatchMsg    = MaxWatches*(maxURLLen+overlay.MaxReceiptSig+128) + 1<<10
	watchDeadline  = 10 * time.Second
	svcWatch       = "micra.watch"
	watchStreamMem = 2 * maxWatchMsg
)
