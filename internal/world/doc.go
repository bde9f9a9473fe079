// Package world is micra's emulated Internet: the test bed that
// integration tests, benchmarks and the demo run against, since no real
// Internet is reachable. It owns everything of that Internet and nothing of
// micra's: it imports only the subnet and internal/geo packages (to read
// real registry and geolocation data and to load its own registry files
// back) and internal/realdata (to find that data), and never node,
// overlay, crawl or libp2p.
//
// # What a world is
//
// Generate builds a World from Params, deterministically: the same Params
// and data files give byte-identical specs, registry files and pages. A
// World has
//
//   - a registry hierarchy inside 127.0.0.0/8, up to eight levels deep
//     counting 127/8 as level 1, as subnet.Tree counts: registry-level
//     blocks (IANA's file), allocations (the RIRs' delegated-extended
//     files, with opaque-ids grouping each organisation's rows),
//     organisation subnets, customer assignments, sub-assignments and
//     unary ranges (RPSL inetnum objects). It is either synthetic or, with
//     Params.FromReal, real allocations of /24 to /16 remapped into 127/8
//     with their routed sub-ranges (ip2asn) at their real offsets. With
//     Params.Geo its sites are rows of a geolocation file at their real
//     places, and the hierarchy is the part of the built-in real one
//     that holds them and the nodes, in its real shape (fromgeo.go): a
//     servable real-geo world, for the demo on real structure.
//   - the anomalies IPMicra meets: organisations with subnets in far-apart
//     places, customer subnets placed far from their parent and siblings
//     or in another city of its country (at rates calibrated to how real
//     addresses sit: micra bench structure),
//     shared-hosting subnets holding many sites, CDN-like sites with a
//     point of presence near everybody, and ranges whose registry country
//     is stale.
//   - every subnet, site and node placed at one of 246 real cities (the
//     places of the WonderProxy latency data, 2020-07-19), country-matched
//     with its registry data.
//   - web sites with generated pages and links, robots.txt, sitemaps, RSS
//     and Atom feeds, schema.org structured data (JSON-LD or microdata,
//     some of it broken), validators and 304s, pages that change over time,
//     redirects, 404s, 5xx and a switchable hostile set (slow drips, huge
//     bodies, gzip bombs, redirect loops, link traps, huge headers,
//     invalid and lying charsets and content codings); and volunteer
//     node addresses.
//
// The latency model: RTT(a, b) is the mean RTT between the two cities (or
// Params.IntraCityRTT within one), plus the last mile of each
// address's smallest range, plus a per-request jitter around zero sized by
// the measured deviation. World.RTT, World.RTTAddr and World.Optimal give
// the true (mean, unscaled) values: the oracle for optimal delegation.
// Addresses outside every organisation's range, and any address outside
// 127/8, are at Params.DefaultCity with a 5 ms last mile. The mean RTT
// between cities is the real WonderProxy matrix's when the data directory
// has it (it has no licence and never ships), else the embedded model's,
// fitted to it (latmodel.go; Params.Latency chooses, World.Latency says
// which a world used). With Params.FromReal and no data directory, the
// real allocations are the built-in snapshot's (subnet/embedded).
//
// # Real-geo worlds
//
// NewGeo builds a Geo instead: real addresses (from a geolocation file,
// ReadGeoSites) in a real hierarchy, each at its own coordinates, placed
// at the nearest location of the latency data with a last mile for the
// rest of the way (LastMileMS: fibre at 200 km/ms, a path twice the great
// circle, there and back), and nodes at the latency data's locations
// drawn with a seed, each with its own access delay (1 to 10 ms) and an
// address in its country's registry allocations. A Geo serves nothing: it
// answers the same questions as a World (sites, nodes, true RTTs) for
// evaluations on the real Internet's structure.
//
// # Serving
//
// World.Start serves it on loopback: every site address listens on one
// port, the DNS server (github.com/miekg/dns, UDP and TCP) on its own
// address, port the same. The server applies the latency model from the
// TCP source address of each connection, so a node must bind its outgoing
// connections to its own address (Running.Dialer and Running.Client do).
// The kernel completes the TCP handshake at once, so the handshake's RTT is
// charged to the first response of a connection: its headers leave two
// RTTs after the accept; a later request on the same connection gets its
// headers one RTT after it arrives. Bodies are paced at the path's
// bandwidth (the slower access link, at most a 512 KiB window per RTT).
// TimeScale shrinks every delay for fast runs; everything the World
// reports stays unscaled. The world never binds, answers for or dials
// anything outside 127/8 (ErrNotLoopback). Start raises the open-file
// limit when one listener per address needs it; a process serves 5,000
// sites.
//
// # How tests use it
//
// Tests in other packages use the worldtest package, which generates each
// world once per process and serves it on a free port until the test ends:
//
//	run := worldtest.Start(t, worldtest.Params(1, 200, 8), world.TimeScale(0.05))
//	w := run.World()
//	node := w.Nodes()[0]                   // Addr, Loc, Subnet
//	client, _ := run.Client(node.Addr)     // bound to the node, world DNS
//	site := w.Sites()[0]                   // Name, Addrs, Loc, Subnet, Kind, ...
//	resp, _ := client.Get(run.URL(site))   // http://name:port/
//	tree, _ := w.Tree(t.Context())         // the registry files, loaded by subnet
//	best, rtt, _ := w.Optimal(site, w.NodeAddrs())
//	for _, pg := range w.Pages(site) { ... } // every page, robots verdict, change rate
//	c := run.Counters(site)                // requests, bytes, max connections by source
//
// A probe is a timed HEAD from the node's address (run.Dialer); compare it
// with run.Scaled(2 * w.RTT(node, site)) on a fresh connection. Processes
// other than the test read the spec (world.json) that World.Write stores
// and "micra world gen" writes; "micra world serve DIR" serves it.
package world
