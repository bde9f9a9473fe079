// Package nattest holds micra's NAT traversal test: volunteer
// nodes behind NATs, for real. Each node runs as its own "micra node"
// process inside Linux network namespaces: a public bootstrap node that
// relays and an indexer in a hosting namespace, the emulated Internet's web
// sites and DNS server in another, and each volunteer in a home namespace
// behind a router namespace that masquerades with nftables. The test
// process is the backbone between the public namespaces: it forwards their
// packets through TUN devices with the latency of the path, and it serves
// the sites and reads every node's dashboard through sockets it opens
// inside the namespaces. docs/nat.md describes the layout, the method and
// the outcome of the last runs.
//
// The test needs Linux, root, ip (iproute2), nft (nftables) and
// /dev/net/tun; without them it skips and says why, except under CI=true,
// where .ci/run provides them and a missing one fails the test. No packet
// leaves the namespaces it creates, and it removes them when it ends (and
// the next run removes those of a run killed by go test's -timeout).
//
// The package has no code outside its tests. It may import anything of
// micra's; nothing imports it.
package nattest
