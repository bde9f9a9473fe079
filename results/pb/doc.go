// Package pb holds the wire schema of micra's result delivery (result
// batches, indexer announcements, crawl requests) and the outbox's stored
// form.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative results.proto
package pb
