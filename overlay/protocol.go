package overlay

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// Protocol IDs of micra's stream protocols. A breaking change gets a new ID;
// the old one is served for one more release. A peer that opens a stream
// with another version is refused by multistream negotiation, and the
// opener's call fails with ErrUnsupportedProtocol.
const (
	// ProbeID: "time an HTTP HEAD to this URL from your own address".
	ProbeID protocol.ID = "/micra/probe/1.0.0"
	// CoordinateID: resolve, delegate, heartbeat, re-delegate and assign,
	// between any node and a shard coordinator; organisation index updates
	// and queries between coordinators.
	CoordinateID protocol.ID = "/micra/coordinate/1.0.0"
	// ReplicateID: a coordinator replicates shard state to the next
	// closest peers, and a peer taking a shard over syncs its state.
	ReplicateID protocol.ID = "/micra/replicate/1.0.0"
	// AuditID: an indexer asks a subnet's coordinator to audit a node's
	// result record (AUDIT), and the coordinator has nodes near the subnet
	// fetch the page afresh (REFETCH).
	AuditID protocol.ID = "/micra/audit/1.0.0"
	// ReleaseID: the release replacing a snapshot (RELEASE_QUERY), and
	// chunks of a released snapshot file (CHUNK_QUERY); see release.go.
	ReleaseID protocol.ID = "/micra/release/1.0.0"
	// AnnounceID: a node's state (capacity, load, subnet count, whether
	// it crawls, the release file it holds, its measured RTTs), sent to
	// its routing-table neighbours and the coordinators it heartbeats and
	// answered with the receiver's own (ANNOUNCE; announce.go).
	AnnounceID protocol.ID = "/micra/announce/1.0.0"

	// DHTPrefix is the Kademlia protocol prefix: micra's DHT speaks
	// /micra/kad/1.0.0 and never joins the IPFS network.
	DHTPrefix protocol.ID = "/micra"
)

// Pubsub topics. Topics carry a version; a breaking change of a payload gets
// a new topic.
const (
	// TopicRelease carries signed snapshot releases (subnet.Release's
	// encoding).
	TopicRelease = "/micra/release/1"
)

// Record namespaces in the DHT. Keys are "/<namespace>/<hex snapshot id>/..."
// and values are pb.SignedRecord; see RecordValidator.
const (
	// DelegationNamespace holds one delegation record per subnet, signed by
	// the coordinator that decided it.
	DelegationNamespace = "micra-delegation"
	// OrgNamespace holds one index record per organisation, signed by the
	// organisation shard's coordinator.
	OrgNamespace = "micra-org"
	// ReleaseNamespace holds the signed release replacing each snapshot,
	// under "/micra-release/<hex parent id>" (ReleaseKey); not
	// snapshot-scoped, since it links one snapshot to the next.
	ReleaseNamespace = "micra-release"
)

// Wire version of pb.Message and pb.Record; this build speaks only it.
const wireVersion = 1

// Size limits of one frame, per protocol, in bytes. Frames are
// varint-length-delimited; a longer frame is refused before it is read.
const (
	maxProbeMsg     = 4 << 10              // one URL (browsers cap URLs near 2 KiB) and a result
	maxCoordMsg     = 256 << 10            // a heartbeat answer lists up to 4096 subnets of ~40 bytes
	maxReplicateMsg = 2 << 20              // a chunk of up to maxEntriesPerMsg entries
	maxAnnounceMsg  = 96 << 10             // an ANNOUNCE is ~70 bytes and up to 1,024 RTTs (a whole row, rttrow.go) of ~45 (81 with the longest usual ids)
	maxRecordSize   = 64 << 10             // a DHT record: an org index of up to maxOrgEntries entries
	maxAuditMsg     = 4 << 20              // an AUDIT carries a whole signed result batch as evidence (node default: 256 KiB of records before compression)
	maxReleaseMsg   = releaseChunk + 1<<10 // a CHUNK of a snapshot file

	maxURLLen        = 2048
	maxEntriesPerMsg = 1024
	maxOrgEntries    = 512
	maxHeartbeatList = 4096
	maxEntryKey      = 128 // a range key (32) and a peer id (38 for Ed25519, at most ~70)
	maxEntryValue    = 16 << 10
)

// Stream deadlines: the whole exchange on one stream must finish within
// these, reading included, so a silent peer cannot hold a stream open.
const (
	probeDeadline     = 30 * time.Second // a probe is a few HTTP HEADs over the Internet
	coordDeadline     = 60 * time.Second // a delegate runs the delegation procedure, which probes
	shortDeadline     = 10 * time.Second // ack, replicate, heartbeat, announce: no remote work
	syncDeadline      = 30 * time.Second // a full shard state, in chunks
	auditDeadline     = 90 * time.Second // an audit waits for up to three refetches, each a polite page fetch
	streamMemory      = 1 << 20          // reserved per stream on the service scope, at most
	maxNotCoordinator = 6                // redirects followed by one request, each to a peer nearer the key
)

// Service names registered with the resource manager, one per protocol.
const (
	svcProbe      = "micra.probe"
	svcCoordinate = "micra.coordinate"
	svcAck        = "micra.ack" // results' acknowledgements (results.AckID); its limits are set here with the host's
	svcReplicate  = "micra.replicate"
	svcAudit      = "micra.audit"
	svcRelease    = "micra.release"
	svcAnnounce   = "micra.announce"
)
