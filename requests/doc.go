// Package requests carries URLs to the nodes that crawl them: seed URLs
// submitted into the overlay, and the links a crawler finds in other
// nodes' subnets, sent to each subnet's owner with the crawl-request
// protocol, answered with receipts; the receiving side's handler and its
// promise policy; and watches, which report a sample of the links handed
// on to indexers.
//
// # A link's path
//
// The crawler asks the Router whether a link's address is this node's
// (crawl.Router); links it does not keep wait in its outgoing store
// (crawl.Crawler.Outgoing). The hand-on loop (HandOn) pages through the
// store: each link passes one egress check (check), its owner is taken
// from what the overlay knows (known: Overlay.Cached), and a subnet whose
// owner is not known is resolved or delegated in the background (owner:
// Overlay.Resolve, then Overlay.Delegate; Submit finds a seed's owner the
// same way). Links go to their owner over CrawlID (Sender) and leave the
// store once its receipts came. Overlay is the one interface to the
// overlay: *overlay.Overlay satisfies it, and node passes one that follows
// its snapshot switches.
//
// # Crawl requests
//
// Submit sends seed URLs with a depth to the nodes owning their subnets
// (overlay Resolve, or Delegate for a subnet not delegated yet) over
// CrawlID; SendCrawlReceipts sends requests to one known owner (a node
// hands its crawler's links on with it) and returns its receipts;
// ServeCrawlRequests is the node's handler, which hands them to the
// crawler. CrawlID is the one URL-delivery protocol between nodes.
//
// Receipts: the owner answers each request with a receipt, its signature
// of the link and the time it took it (overlay.SignReceipt), and a frame
// whose receipts are missing, not the owner's, of other links or dated
// more than ten minutes off the sender's clock counts as not delivered
// (SubmitResult.Receipts). An indexer keeps each receipt with its pending
// request: a withholding notice is judged only on one (overlay.Withheld).
// So a node signs only for the requests it can crawl in time (Promises,
// NewPromiser; crawl.Crawler.Promise): the others get an empty receipt,
// and Submit fails them with ErrNotTaken, to be sent again.
//
// Watches (watch.go): a node reports a sample of the links it handed on,
// each with its owner's receipt (SendCrawlReceipts), to the indexers of
// their result shards (SendWatches, WatchID; ServeWatches is the
// indexer's handler), which keep them as their own crawl requests.
//
// Special-purpose addresses are refused where they enter: Submit refuses
// a seed whose host is one (an IP literal, or localhost) or resolves to
// one, under the overlay's egress policy, before any delegation;
// ServeCrawlRequests refuses a frame with a request whose host is one,
// under its Egress policy. Each refusal names the URL, the address and its
// registry entry, and wraps egress.ErrSpecialPurpose.
//
// requests imports overlay, crawl, egress, subnet, internal/p2pstream,
// internal/check and libp2p; it must not import results, indexer, node or
// cmd: node passes in what it needs of them (the indexers of a host's
// result shard, the crawler's promises).
package requests
