// Package pb holds the wire schema of micra's overlay protocols and records.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative overlay.proto
package pb
