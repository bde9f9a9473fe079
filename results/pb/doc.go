// Package pb holds the wire schema of micra's result delivery (result
// batches, indexer announcements) and the outbox's and indexer's stored
// forms.
//
//go:generate protoc -I. -I../../requests/pb --go_out=. --go_opt=paths=source_relative results.proto
package pb
