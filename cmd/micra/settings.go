package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/micra-net/micra/internal/tomlfile"
)

// applySettings gives the flags of fs not set on the command line their
// values from a TOML file (keys: the flag names with _ for -), then from
// the environment (envPrefix and the key in upper case), so that flags win
// over variables and variables over the file, as for micra node. Every
// problem is named where it came from: FILE:LINE or the variable; an
// unknown key with the one it was probably meant to be.
func applySettings(fs *flag.FlagSet, file string, environ []string, envPrefix string, skip ...string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var keys []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 && !slices.Contains(skip, f.Name) { // not -v and the like
			keys = append(keys, strings.ReplaceAll(f.Name, "-", "_"))
		}
	})
	var errs []error
	if file != "" {
		errs = append(errs, applyFile(fs, file, keys, given)...)
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		key, found := strings.CutPrefix(name, envPrefix)
		if !ok || !found {
			continue
		}
		key = strings.ToLower(key)
		if !slices.Contains(keys, key) {
			continue // another command's variable: micra node warns of strays
		}
		flagName := strings.ReplaceAll(key, "_", "-")
		if given[flagName] {
			continue
		}
		if err := fs.Set(flagName, val); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
	}
	return errors.Join(errs...)
}

func applyFile(fs *flag.FlagSet, file string, keys []string, given map[string]bool) []error {
	var values map[string]any
	_, fileKeys, err := tomlfile.Decode(file, &values)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, k := range fileKeys {
		key, at := k.Name, k.At
		if !slices.Contains(keys, key) {
			errs = append(errs, tomlfile.Unknown(k, keys))
			continue
		}
		flagName := strings.ReplaceAll(key, "_", "-")
		if given[flagName] {
			continue
		}
		var s string
		switch v := values[key].(type) {
		case []any:
			parts := make([]string, len(v))
			for i, e := range v {
				parts[i] = fmt.Sprint(e)
			}
			s = strings.Join(parts, ",")
		case map[string]any:
			errs = append(errs, fmt.Errorf("%s: %s: takes a value, not a table", at, key))
			continue
		default:
			s = fmt.Sprint(v)
		}
		if err := fs.Set(flagName, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %v", at, key, err))
		}
	}
	return errs
}
