// Package footprint measures one volunteer node's CPU and memory: a real
// "micra node" process joined to a small network on an emulated Internet
// served by this process (peers that coordinate shards but never crawl,
// and an indexer), idle and then crawling at its bandwidth cap, read from
// /proc every second (micra bench footprint; docs/performance.md).
//
// footprint.go runs the phases and reports; lab.go is the network the
// node joins (the world, the peers, the indexer, the seeds); measured.go
// is the node's process and what is read of it.
//
// footprint is a rig: it imports node, indexer, overlay, crawl and
// internal/world, and is imported by cmd/micra only; micra's own packages
// must not import it.
package footprint
