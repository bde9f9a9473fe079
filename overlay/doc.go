// Package overlay owns micra's peer-to-peer layer: the libp2p host
// (NewHost: TCP and QUIC, resource and connection managers, AutoNAT, circuit
// relay v2 and hole punching), the node identity (LoadIdentity), the
// Kademlia DHT under the /micra protocol prefix with the routing-table
// diversity filter and validators for micra's signed records, the GossipSub
// topics, the request/response protocols (probe, coordinate, ack,
// replicate, audit, release, announce; see protocol.go), and the sharded
// coordination of subnet delegations.
//
// # Sharded coordination
//
// The subnet tree is cut into shards: the subtree under an anchor range
// (by default the allocation level, see AllocationDepth), and one shard per
// organisation indexing that organisation's delegated ranges. A shard's key
// is SHA-256 over a domain tag, the snapshot id and the anchor range (or the
// organisation key); its coordinator is the live peer closest to the key in
// Kademlia's XOR metric. The coordinator is the single writer of the shard:
// it runs the delegation procedure (a Delegator) once per subnet
// however many nodes ask, signs the decision, stores it in badger with the
// shard's epoch and replicates it to the next closest peers (Replication,
// default 3) before answering. A peer that becomes closest claims the shard
// with a higher epoch after collecting the state of a majority of the
// replica set, which promises to refuse older writes; so a takeover loses no
// acknowledged decision and of two peers that both believe they coordinate
// only the higher epoch wins. The claim confirms the claimant's view: a
// replica that knows a live peer nearer the key refuses and names it, so a
// node claims a shard without a DHT lookup (claim.go). A coordinator
// re-checks the shards it holds with one lookup of its own neighbourhood,
// not one per shard: the keys it coordinates lie in it (hood.go). Crawlers heartbeat the coordinators of the
// shards they hold subnets in; a crawler silent past the liveness timeout
// has its subnets orphaned and handed back to the delegation procedure.
// Nodes cache resolved delegations. The coordinator of an organisation
// shard also publishes the shard's index as a signed record in the DHT
// (bounded in size and rate, refreshed, newest epoch wins), which any node
// reads when that coordinator cannot be reached.
//
// # Delegation
//
// The procedure itself (package overlay/delegate: the IPMicra search of
// package subnet and load balancing) sees the coordinator's shard through
// a DelegationEnv. Beyond the shard it learns the organisation's
// delegations from the organisation shard, and above the shard's anchor
// from block shards: one per range above the anchors, indexing every
// decision under it with its probe results (each decision is sent to the
// parent of its anchor, and to higher ranges for which it lies among the
// children or grandchildren), so a bottom-up search learns a level in one
// request. A probe is a PROBE request to the asked node, which times HTTP
// HEADs from its own address through its Prober, inside its ProbeWindows;
// results are stored in the shard. A joining node claims its own subnet
// (OwnAddress, ClaimOwn; paper III.D), granted by the coordinator without
// the procedure when the node's connection comes from that subnet. A node
// whose fetches of a subnet got slow asks for a re-decision with fresh
// probes (Redelegate; crawl.Calibrator detects it), and a node that finds a
// server in its range much farther than the probe it won the range with
// has the part of the range holding it delegated apart (Split, part.go).
// Load balancing moves a
// subnet of another shard with REASSIGN, accepted only from a peer
// plausibly coordinating the shard of the decision that needed the room.
//
// # Audits
//
// Indexers have sampled result records checked (AUDIT on AuditID) by the
// coordinator of the record's subnet, which verifies the author's signed
// batch (EvidenceOpener), has the nodes nearest to the subnet after the
// author refetch the page (REFETCH, served by a Refetcher) and compares
// fingerprints; confirmed disagreements convict the author, whose subnets
// are then re-delegated and whom later verdicts name convicted (audit.go; tallies.go).
//
// # Withholding
//
// Indexers report crawl requests left unanswered past their patience
// (WITHHELD on AuditID, Withheld) to the coordinator of the page's subnet,
// which notes the first notice, judges one that comes again after its
// grace (an auditor of another place must fetch the page) and takes the
// subnet back from its node, keeping the node out of it for a day in the
// shard's replicated state (WITHHELD entries; withhold.go).
//
// # Releases
//
// A network moves to new registry data by signed releases (subnet.Release):
// nodes take those signed by a key given with ReleaseKeys, spread them on
// TopicRelease and in the DHT (ReleaseNamespace), fetch the released
// snapshot file in chunks from peers that hold it (ReleaseID), check it and
// keep it for the switch (release.go; PublishRelease, NextRelease,
// ReleasedTree). An overlay started on the new tree with Previous carries
// the node's delegations of the old one into it (CARRY, carry.go), and the
// probe results stored in the old shards it coordinated (CARRY_PROBES,
// carryprobes.go). A peer that switches keeps one pubsub router across its
// overlays (WithPubSub).
//
// # Announcements
//
// A node's state that a coordinator weighs when it decides — declared
// capacity and load, subnet count, whether the node crawls at all
// (NoCrawl), the release file it serves, its measured RTTs to other
// peers — travels in announcements (announce.go). Flooded on a global
// GossipSub topic, every node would receive every node's announcement,
// about once per mesh peer, and a node's idle upkeep would grow linearly
// with the network (nine tenths of it at 100 nodes, measured so). A node
// exchanges its announcement over AnnounceID with its neighbours only:
// the peers of its DHT routing table, about 20 × log2(N/20) of them, and
// the coordinators of the shards it heartbeats; the receiver keeps it and
// answers with its own. A round costs a node O(log N), and a pair of
// neighbours exchanges once a round (a pair that exchanged less than half
// a round ago is skipped).
//
// This suffices because of where a coordinator's candidates come from.
// Nodes near a site are found through the hierarchy: the holders of
// sibling and cousin ranges, from the shard's own delegations, the
// organisation shard and the block shards, each with stored probe results.
// The crawlers holding subnets in a shard heartbeat its coordinator with
// their capacity, load and subnet count (LOAD entries, lastSeen). The rest
// of the network, the fallback pool a search widens to (env.Peers), is the
// coordinator's routing table, and the answer makes the exchange
// symmetric: a coordinator hears from every peer in its routing table
// (and from every peer that has it in its own), so it knows which of its
// candidates crawl, their load and their RTTs to their own neighbours,
// which are largely its candidates too. A peer it has never heard from is
// a candidate with unknown capacity, as before its first announcement. A
// node behind NAT, a DHT client in no routing table, announces itself to
// the servers in its own table and to its coordinators, seconds after its
// start (firstAnnounce), and is a candidate for them; elsewhere it is
// found, like any node, through the ranges it holds. A node that stores a
// release's file tells its neighbours at once, so holders are known
// along the routing tables as fast as the file spreads; the release
// itself, a rare event every node needs, stays on TopicRelease.
//
// An announcement's author is the stream's remote peer, authenticated by
// the connection's handshake: nothing is relayed, so nothing needs
// GossipSub's per-message signature. Requests are bounded in size and
// budgeted per peer, and the tables they feed are bounded.
//
// Everything received from peers is untrusted: frames are size-limited and
// checked, records are verified against their writer's key, streams have
// deadlines, and queues and tables are bounded.
//
// # Special-purpose addresses
//
// A web server on a loopback, private, link-local, CGNAT, documentation,
// multicast or other special-purpose address (the IANA registries, package
// egress), or named localhost, is never delegated nor probed: Delegate,
// Resolve, Split, Probe and ClaimOwn refuse it before asking anyone, and a
// coordinator refuses DELEGATE, SPLIT and RESOLVE of one, a node PROBE of a
// URL on one, from peers that may not share its policy, with
// FORBIDDEN naming the address and its registry entry (special.go). A
// prober's refusal of a name resolving to one is FORBIDDEN too, not a
// failed probe, so nothing is stored. The policy is the node's (Egress);
// allow_private_networks lifts it for the emulated Internet on 127/8.
//
// overlay may import subnet, bootstrap, egress and internal/check; it must
// not import crawl or node.
package overlay
