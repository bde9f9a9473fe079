// Package scale measures micra's overlay at network sizes a machine cannot
// run in real time: hundreds to thousands of whole overlays (libp2p host,
// Kademlia DHT, gossipsub, sharded coordinators, the delegation procedure)
// on go-libp2p's simulated network in virtual time (a testing/synctest
// bubble; internal/virtual runs one outside go test). Links have the real
// latency matrix's RTTs between the nodes' locations in a generated world
// (internal/world), probes are answered by the world's latency model, and
// every figure is counted, not modelled: stream bytes from libp2p's
// bandwidth counter, requests and DHT queries from the overlays' counters,
// virtual time from the bubble's clock. The delegations' quality (optimal
// share, excess per URL) is judged against the latency model's oracle by
// internal/evaluate's definitions.
//
// Run's phases each have a file: sim.go builds the network and converges
// it, measure.go reads the upkeep and the last figures, delegate.go
// delegates and resolves, churn.go replaces nodes and accounts for what
// they held.
//
// scale is a rig: it imports overlay, bootstrap and internal packages
// (internal/evaluate for the metrics' definitions), and is imported by
// cmd/micra (micra bench overlay) and tests. It must not be imported by
// micra's own packages (node, overlay, crawl and those below them): it
// runs in a synctest bubble and holds no code a node needs.
package scale
