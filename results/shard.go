package results

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/micra-net/micra/crawl"
)

// ShardOf returns the result shard of a host name among shards: xxHash64 of
// the lower-case name, modulo shards. A site's records all go to one
// shard, so an indexer taking a shard holds whole sites.
func ShardOf(host string, shards uint32) uint32 {
	if shards <= 1 {
		return 0
	}
	return uint32(xxhash.Sum64String(strings.ToLower(host)) % uint64(shards))
}

// RecordShard returns the shard of a record: that of its URL's host (shard
// 0 when the URL does not parse; the indexer rejects such records).
func RecordShard(r *crawl.Record, shards uint32) uint32 {
	if shards <= 1 {
		return 0
	}
	u, err := url.Parse(r.URL)
	if err != nil {
		return 0
	}
	return ShardOf(u.Hostname(), shards)
}

// shardBatch is the part of a crawler batch that belongs to one shard.
type shardBatch struct {
	shard uint32
	batch crawl.Batch
}

// splitShards regroups a crawler batch by shard. With one shard the batch
// goes as it is; otherwise it is decoded and each shard's records are
// encoded again (in their original order).
func splitShards(b crawl.Batch, shards uint32) ([]shardBatch, error) {
	if shards <= 1 {
		return []shardBatch{{0, b}}, nil
	}
	recs, err := crawl.DecodeBatch(b.Data)
	if err != nil {
		return nil, fmt.Errorf("decoding the crawler's batch: %w", err)
	}
	groups := map[uint32][]crawl.Record{}
	var order []uint32
	for i := range recs {
		s := RecordShard(&recs[i], shards)
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], recs[i])
	}
	out := make([]shardBatch, 0, len(order))
	for _, s := range order {
		nb, err := crawl.EncodeBatch(groups[s])
		if err != nil {
			return nil, fmt.Errorf("encoding shard %d: %w", s, err)
		}
		out = append(out, shardBatch{s, nb})
	}
	return out, nil
}

// fitParts splits batches whose data exceeds maxData (what maxParts
// messages carry) into smaller ones, halving their records until each
// fits; a single record that does not fit is an error.
func fitParts(groups []shardBatch, maxData int) ([]shardBatch, error) {
	var out []shardBatch
	for len(groups) > 0 {
		g := groups[0]
		groups = groups[1:]
		if len(g.batch.Data) <= maxData {
			out = append(out, g)
			continue
		}
		recs, err := crawl.DecodeBatch(g.batch.Data)
		if err != nil {
			return nil, fmt.Errorf("decoding a large batch: %w", err)
		}
		if len(recs) < 2 {
			return nil, fmt.Errorf("%w: one record compresses to %d bytes, more than %d messages carry", ErrMalformed, len(g.batch.Data), maxParts)
		}
		var halves []shardBatch
		for _, part := range [][]crawl.Record{recs[:len(recs)/2], recs[len(recs)/2:]} {
			nb, err := crawl.EncodeBatch(part)
			if err != nil {
				return nil, err
			}
			halves = append(halves, shardBatch{g.shard, nb})
		}
		groups = append(halves, groups...)
	}
	return out, nil
}
