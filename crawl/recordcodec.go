package crawl

import "fmt"

// MaxRecordBytes is the largest encoded record a batch may hold, and so the
// largest DecodeRecord accepts.
const MaxRecordBytes = maxRecordBytes

// AppendRecord appends the binary encoding of r to b and returns the
// extended slice. It is the form a record takes inside a batch (record
// version 1, or version 2 when it has Statements: version 1's fields and
// then tagged sections, of which a decoder skips those it does not know);
// indexers store records in it. Encoding is canonical after one
// round trip: times keep nanoseconds, durations microseconds, a FinalURL
// equal to URL is not repeated and negative sizes become 0.
func AppendRecord(b []byte, r *Record) []byte { return appendRecord(b, r) }

// DecodeRecord decodes one record written by AppendRecord. It accepts
// untrusted input: every length is bounded (URLs and titles 8 KiB, 4096
// keywords, 100000 links, 256 owners, 4096 statements with strings of 8
// KiB, MaxRecordBytes in all) and any
// inconsistency, trailing bytes included, fails with ErrBatchCorrupt; an
// unknown record version fails with ErrBatchVersion. Safe for concurrent
// use.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) > maxRecordBytes {
		return Record{}, fmt.Errorf("%w: record of %d bytes", ErrBatchCorrupt, len(b))
	}
	return decodeRecord(b)
}
