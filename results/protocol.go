package results

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// Pubsub topics and the stream protocol of result delivery. Topics carry a
// version; a breaking change of a payload gets a new topic.
const (
	// TopicIndexers carries indexer announcements (pb.Announce): every
	// node subscribes to learn whom to expect acknowledgements from.
	TopicIndexers = "/micra/indexers/1"

	// TopicResults carries the signed result envelopes of an unsharded
	// network; a sharded one has a topic per shard (Topic).
	TopicResults = "/micra/results/1"

	// AckID: an indexer acknowledges result batches to their author.
	AckID protocol.ID = "/micra/ack/1.0.0"
)

// Topic returns the result topic of one shard: TopicResults when
// results are not sharded (shards == 1), "/micra/results/<shard>-of-<shards>/1"
// otherwise. The shard count is in the name so that peers configured with
// different counts never mix their shards.
func Topic(shard, shards uint32) string {
	if shards <= 1 {
		return TopicResults
	}
	return fmt.Sprintf("/micra/results/%d-of-%d/1", shard, shards)
}

// Wire version of pb.Envelope and pb.Announce.
const wireVersion = 1

// signPrefix is what a batch signature covers before the header, so that a
// signature over a header can never be taken for one over anything else.
const signPrefix = "micra-results/1:"

// Sizes and counts accepted from the network.
const (
	// DefaultMessageLimit is overlay's pubsub message limit
	// (pubsub.WithMaxMessageSize in overlay.New): a larger RPC is dropped
	// by GossipSub without notice, so every result message stays below it.
	DefaultMessageLimit = 1 << 20
	// messageOverhead is left in each pubsub message for the envelope's
	// header and signature (≤ 3 KiB with 64 parts) and pubsub's own framing
	// (sender, sequence number, topic, signature: ~200 bytes).
	messageOverhead = 8 << 10
	// MinMessageLimit is the least message limit (MessageLimit) that
	// leaves room for data beside the envelope.
	MinMessageLimit = 16 << 10
	// MaxShards is the most result shards a network has.
	MaxShards = 4096
	// MaxAnnounceLifetime is the longest an indexer announcement holds.
	MaxAnnounceLifetime = 24 * time.Hour

	maxHeader      = 8 << 10  // a Header with maxParts hashes is ~2.5 KiB
	maxParts       = 64       // parts of one batch
	maxBatchData   = 32 << 20 // compressed bytes of one batch (the crawler's raw cap is 16 MiB)
	maxBatchRecs   = 1 << 20  // crawl's own cap
	maxAnnounceMsg = 2 << 10  // a pb.Announce with 16 addresses
	maxAnnAddrs    = 16
	clockSkew      = 10 * time.Minute // how far in the future a timestamp may be

	maxAckMsg     = 64 << 10 // up to maxAckBatches references of ~80 bytes
	maxAckBatches = 512
	ackDeadline   = 10 * time.Second
	svcAck        = "micra.ack" // its limits are set by overlay.NewHost
)
