package world

import "net/url"

func parseRequestURI(s string) (*url.URL, error) { return url.Parse(s) }
