// Package node is the only package that wires micra together: it opens the
// node's single badger database, builds the libp2p host, DHT and pubsub, the
// crawler and the coordination service, hands each package its parts, and
// shuts them down in order.
//
// node may import overlay, crawl, bootstrap and subnet; nothing of micra's
// imports node except cmd/micra.
package node
