package index

import (
	"context"
	"io"

	"github.com/micra-net/micra/crawl"
)

// Store is what an indexer keeps its records in and searches: the
// embedded store (Index, on the node's badger database: nothing to
// install) or the PostgreSQL store (Postgres, for an index that outgrows
// one machine or is shared by several indexers). Both have the semantics
// their methods document on Index, checked by one contract suite: the
// same records give the same state whatever the order of delivery, the
// same query language and, up to rounding, the same ranking. Handler
// serves either over HTTP.
//
// The interface is sealed (it has unexported methods): a third store
// would have to live in this package, next to the contract it must pass.
type Store interface {
	Put(ctx context.Context, src Source, recs []crawl.Record) (PutResult, error)
	PutBatch(ctx context.Context, src Source, data []byte) (PutResult, error)
	Get(ctx context.Context, url string) (Doc, error)
	Search(ctx context.Context, q Query) (*Results, error)
	Stats() Stats
	Distrust(nodes ...string)
	HostsOf(ctx context.Context, node string, max int) ([]string, error)

	Profiles(ctx context.Context) ([]Profile, error)
	Profile(ctx context.Context, name string) (Profile, error)
	PutProfile(ctx context.Context, p Profile) (Profile, error)
	DeleteProfile(ctx context.Context, name string) error
	Matches(ctx context.Context, name string, limit, offset int) (*MatchPage, error)

	Export(ctx context.Context, w io.Writer) (int, error)
	ExportNTriples(ctx context.Context, w io.Writer) (NTriplesStats, error)
	Verify(ctx context.Context) error
	Close() error

	// settings returns the store's configuration; check fails with
	// ErrClosed after Close, or with ctx's error; eachRecord calls f with
	// every searchable record, in id order, from one snapshot.
	settings() *config
	check(ctx context.Context) error
	eachRecord(ctx context.Context, f func(docID, *Doc) error) error
}

var _ Store = (*Index)(nil)

func (x *Index) settings() *config { return x.cfg }
