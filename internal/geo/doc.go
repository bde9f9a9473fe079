// Package geo reads geolocation CSV files: rows that place an IP prefix or
// address at coordinates, such as DB-IP's IP-to-City Lite (every routed
// IPv4 prefix with its city and coordinates), a list of server addresses
// with their positions, or one organisation's prefixes in many cities.
// Evaluations use them to put real addresses of the real registry
// hierarchy at real places.
//
// The input is untrusted: a malformed row is skipped and counted with its
// file:line (an error under Strict), and records, rows and decompressed
// bytes are bounded.
//
// DB-IP's data is CC BY 4.0: wherever results derived from it are shown,
// credit "IP Geolocation by DB-IP" with a link to https://db-ip.com.
//
// geo imports nothing of micra's.
package geo
