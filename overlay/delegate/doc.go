// Package delegate is micra's delegation procedure in the overlay: the
// overlay.Delegator a shard coordinator runs to give a new subnet to the
// node nearest to it. It runs the same search as the benchmark and the
// unit tests — subnet.IPMicra, micra's guided variant by default, the
// paper's pure one with Pure — over the coordinator's DelegationEnv, then
// applies IPMicra's load balancing (subnet.Balance).
//
// # What the coordinator sees
//
// A coordinator holds one shard: the subtree under an anchor range (an
// allocation, by default), with every delegation and stored probe result
// in it. The search reads it through a subnet.Table and a subnet.ProbeIndex
// built per decision from the shard's store (no network). Beyond the
// shard it sees, each at a cost:
//
//   - the organisation's other delegations (the search's step 2): one
//     request to the organisation's shard, made only when the organisation
//     has other ranges, cached for the CacheTTL;
//   - above the anchor (the bottom-up step at ranges x containing the
//     shard): the block index of x (overlay.DelegationEnv.Block), which
//     holds the delegations among x's children and grandchildren and the
//     decisions under x with their probe results — one request per level
//     the search climbs into, at most one per level per CacheTTL, and only
//     when the search gets there (the guided search's predictions look
//     upwards until some level has probe results);
//   - candidates: the coordinator's peers (DelegationEnv.Peers: its
//     routing table, the peers that announce to it, the crawlers that
//     heartbeat its shards: 86 of 100 nodes, 150 of 300 in micra bench
//     overlay), and the nodes named in the stored probes the decision
//     reads and in the Delegator's places that may crawl
//     (DelegationEnv.MayCrawl): the guided search's predictions point at
//     nodes anywhere, and a probe to a node this coordinator has no
//     address of starts with a DHT lookup of it (Overlay.Probe);
//   - probe requests: one per node asked, each a stream to the node (which
//     times HTTP HEADs from its own address) and one replicated write of
//     the result in the shard; at most MaxProbes per decision, the
//     claim check's witnesses (subnet.ClaimCheck) included: a witness
//     with a stored probe of the subnet is taken as it is, and the
//     others asked are probes like any other, counted in Stats.Probes;
//   - inter-node RTTs for the guided search's triangle-inequality bounds:
//     overlay.DelegationEnv.Between (the least of a node's pings to its
//     peers, and the RTTs peers announce), or the Between option; from the same RTTs, over the decision's peers, the
//     network's density (subnet.NearestRTT, at most once a minute or when
//     the peers' number moves by more than a tenth), which sets the
//     guided search's tolerance (subnet.SearchConfig.Nearest) unless the
//     Tolerance option fixes it;
//   - load balancing: the declared capacity and load of peers (heartbeats
//     and announcements, through DelegationEnv.Peers), and for a hand-off
//     one REASSIGN request to the coordinator of the handed-off subnet.
//
// Node names in the search are peer IDs (string(peer.ID)).
//
// delegate imports overlay, subnet and internal/check; it must not import
// crawl or node.
package delegate
