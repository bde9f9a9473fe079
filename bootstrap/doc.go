// Package bootstrap owns how a node finds its first peers: bootstrap peer
// addresses from flags, configuration, a file, the environment and an
// embedded default list, and dialling them with backoff.
//
// Every bootstrap address is a multiaddr that ends in /p2p/<peer id>, for
// example /ip4/192.0.2.7/tcp/4001/p2p/12D3KooW... Addresses are untrusted
// input: parsers name the entry they refuse and never panic.
//
// Any node with a stable, published address can serve as a bootstrap peer
// for others; [Addrs] formats a host's own addresses in the form the parsers
// accept.
//
// bootstrap imports nothing of micra's but the leaf internal/check.
package bootstrap
