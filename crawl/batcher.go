package crawl

import (
	"context"
	"time"
)

// Records out: batches sealed by size and age, handed to the Sink.

// batcher groups records into batches by size and age and hands them to
// the sink, carried (records pending from an earlier run) first. Once the
// sink has a batch, its records' pending keys are deleted.
func (c *Crawler) batcher(carried []pendingRecord) {
	var raw []byte
	var keys [][]byte
	var n int
	var oldest time.Time
	tick := time.NewTicker(min(c.cfg.batchAge/4+time.Millisecond, time.Second))
	defer tick.Stop()
	flush := func(final bool) {
		if n == 0 {
			return
		}
		b := sealBatch(raw, n, oldest)
		if c.deliver(b, final) {
			if err := c.front.deletePending(keys); err != nil {
				c.log.Error("frontier failed", "error", err)
			}
		}
		raw, keys, n, oldest = nil, nil, 0, time.Time{}
	}
	add := func(r pendingRecord) {
		if n > 0 && len(raw)+len(r.raw)+10 > c.cfg.batchBytes {
			flush(false)
		}
		raw = appendUvarint(raw, uint64(len(r.raw)))
		raw = append(raw, r.raw...)
		if r.key != nil {
			keys = append(keys, r.key)
		}
		if n == 0 {
			oldest = r.time
		}
		n++
		c.stats.records.Add(1)
		if len(raw) >= c.cfg.batchBytes {
			flush(false)
		}
	}
	for _, r := range carried {
		add(r)
	}
	for {
		select {
		case r, ok := <-c.records:
			if !ok {
				flush(true)
				return
			}
			add(r)
		case <-tick.C:
			if n > 0 && time.Since(oldest) >= c.cfg.batchAge {
				flush(false)
			}
		}
	}
}

// deliver hands b to the sink, retrying with backoff; false if it could
// not before shutdown (its records stay pending for the next start).
func (c *Crawler) deliver(b Batch, final bool) bool {
	ctx := c.ctx
	if final || ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		err := c.sink.Results(ctx, b)
		if err == nil {
			c.stats.batches.Add(1)
			c.stats.recordBytes.Add(int64(len(b.Data)))
			return true
		}
		if ctx.Err() != nil {
			c.log.Warn("result batch not delivered at shutdown; kept for the next start", "records", b.Records, "error", err)
			return false
		}
		c.log.Warn("sink refused batch; retrying", "error", err, "attempt", attempt)
		select {
		case <-time.After(min(time.Second<<min(attempt, 6), time.Minute)):
		case <-ctx.Done():
		}
	}
}
