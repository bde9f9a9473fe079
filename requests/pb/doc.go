// Package pb holds the wire schema of micra's URL delivery: crawl
// requests with their receipts, and watches.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative requests.proto
package pb
