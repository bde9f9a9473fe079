// Package overlay owns micra's peer-to-peer layer: the libp2p host, the
// Kademlia DHT under the /micra protocol prefix, the pubsub topics, and the
// sharded coordination of subnet delegations (each shard of the subnet
// hierarchy is coordinated by the live peer closest to its key).
//
// overlay may import subnet and bootstrap; it must not import crawl or node.
package overlay
