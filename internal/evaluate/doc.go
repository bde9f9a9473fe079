// Package evaluate reproduces the IPMicra paper's evaluation of delegation
// strategies (thesis 8.6 and 7.7) on the emulated Internet of
// internal/world, with the metric definitions of DESIGN.md:
//
//   - optimal delegation: the delegated node has the lowest true RTT to the
//     site among the nodes of the run;
//   - probes per delegation: probe requests issued to delegate;
//   - excess RTT: the delegated node's RTT minus the optimal RTT, averaged
//     over the sub-optimal delegations.
//
// Two experiments are run for any set of strategies, node counts and
// probing thresholds, over several seeds: the training split (65 % of the
// sites delegated optimally first, then the other 35 % by the strategy) and
// progressive learning (from a clean start, every site in turn, with the
// trend of probes per site). Every node starts owning its own subnet
// (paper III.D).
//
// Probes are answered by a Prober: the world's latency model (ModelProber:
// fast and exactly reproducible) or the least of three samples of the
// world's per-request jitter (JitterProber), what a timed probe measures.
// The same evaluation runs on real structure (LoadGeo): real addresses from
// a geolocation file, in the built-in real hierarchy, at their real places.
// The crawl-speed experiments (Crawl) crawl that world's sites with micra's
// crawler.
//
// The benchmarks micra bench delegation and crawl run here whole
// (RunDelegationBench, RunCrawlBench): cmd/micra parses their flags and
// prints what they return.
//
// evaluate imports subnet, subnet/embedded, crawl, internal/geo and
// internal/world only, never node, overlay or libp2p: a running network's
// decisions come in through CrawlConfig.Decide.
package evaluate
