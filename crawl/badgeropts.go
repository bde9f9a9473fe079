package crawl

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BadgerOptions returns badger options for the node's database, sized so
// that a crawler with a frontier of ten million URLs needs less than 256 MB
// of anonymous memory (bench/README.md has the measurement and the
// command). The node opens its one *badger.DB with these, or stricter, and
// may change Logger and other settings that do not hold memory.
//
// What differs from badger.DefaultOptions, and why. The frontier writes
// small values at a high rate, so compaction never rests, and badger's
// memory goes to memtables and to the table builders of compactions:
//   - MemTableSize 8 MiB, NumMemtables 2: the defaults (64 MiB × 5) alone
//     may hold 320 MiB of memtables while flushes lag behind;
//   - NumLevelZeroTables 3, NumLevelZeroTablesStall 6: level 0 is
//     compacted early and never grows to the many tables that an L0→L0
//     compaction merges in one builder of up to 256 MiB;
//   - BaseTableSize 1 MiB, TableSizeMultiplier 1: each table builder
//     reserves twice its table size, a compaction keeps up to eight
//     builders (plus one per split) in flight, and badger pools eight
//     more; with the default multiplier the tables of the bottom level,
//     and so its builders, grow to 64 MiB;
//   - Compression None: compressing builders keep each block twice and
//     their memory grew to hundreds of MiB under this load; the frontier's
//     values are short and the disk they take matters less;
//   - BlockCacheSize 0: without compression (or encryption) a block is
//     read in place from the memory-mapped table, so a cached block saves
//     only parsing its header, and badger charges it the rest of the
//     mapping (cap of the slice): each insert evicted the whole cache, 4 to
//     15 % of reads hit, and the cache cost CPU, heap and a warning in the
//     log every minute (docs/performance.md, Footprint);
//   - IndexCacheSize 16 MiB: a bounded index cache keeps the indexes of
//     thousands of tables from all staying in memory;
//   - NumCompactors 2, the least badger accepts.
//
// MemTableSize cannot go much lower with badger's default ValueThreshold
// (1 MiB): a write batch may hold 15 % of a memtable and a value of
// ValueThreshold must fit in one, so memtables need 6.7 MiB at least; a
// lower ValueThreshold would send large values to the value log, which
// the node never garbage-collects.
func BadgerOptions(dir string) badger.Options {
	o := badger.DefaultOptions(dir).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(6).
		WithBaseTableSize(1 << 20).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(16 << 20).
		WithNumCompactors(2).
		WithNumVersionsToKeep(1)
	o.TableSizeMultiplier = 1 // no With method in badger v4
	return o
}
