package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/subnet"
)

// builtinSnapshot names the snapshot built into micra where a command takes
// snapshot files.
const builtinSnapshot = "builtin"

// loadSnapshotArg reads a snapshot named on the command line: a file, or
// builtinSnapshot.
func loadSnapshotArg(name string) (*subnet.Tree, error) {
	if name == builtinSnapshot {
		return loadSnapshot("")
	}
	return loadSnapshot(name)
}

type jsonDiffExample struct {
	Kind string   `json:"kind"`
	Old  []string `json:"old"`
	New  []string `json:"new"`
}

type jsonDiff struct {
	Old        string            `json:"old"`
	New        string            `json:"new"`
	OldRanges  int               `json:"old_ranges"`
	NewRanges  int               `json:"new_ranges"`
	Unchanged  int               `json:"unchanged"`
	Split      int               `json:"split"`
	Merged     int               `json:"merged"`
	Removed    int               `json:"removed"`
	Added      int               `json:"added"`
	Parts      int               `json:"parts"`
	MergedInto int               `json:"merged_into"`
	Examples   []jsonDiffExample `json:"examples"`
}

func rangeStrings(rs []subnet.Range) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

func subnetDiff(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet diff", "[flags] OLD NEW   (snapshot files, or \"builtin\")", stderr)
	asJSON := fs.Bool("json", false, "print the comparison as one JSON object")
	examples := fs.Int("examples", 3, "show up to `N` examples of each kind of change")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return fmt.Errorf("%w: want two snapshots, got %d arguments", errUsage, fs.NArg())
	}
	if *examples < 0 || *examples > 1000 {
		return fmt.Errorf("%w: --examples must be 0 to 1000", errUsage)
	}
	oldTree, err := loadSnapshotArg(fs.Arg(0))
	if err != nil {
		return err
	}
	newTree, err := loadSnapshotArg(fs.Arg(1))
	if err != nil {
		return err
	}
	d := subnet.DiffTrees(oldTree, newTree, *examples)
	j := jsonDiff{
		Old: d.Old.String(), New: d.New.String(), OldRanges: d.OldRanges, NewRanges: d.NewRanges,
		Unchanged: d.Unchanged, Split: d.Split, Merged: d.Merged, Removed: d.Removed, Added: d.Added,
		Parts: d.Parts, MergedInto: d.MergedInto, Examples: []jsonDiffExample{},
	}
	for _, e := range d.Examples {
		j.Examples = append(j.Examples, jsonDiffExample{e.Kind, rangeStrings(e.Old), rangeStrings(e.New)})
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(j)
	}
	fmt.Fprintf(stdout, "old %s: %d ranges\nnew %s: %d ranges\n", d.Old.Short(), d.OldRanges, d.New.Short(), d.NewRanges)
	fmt.Fprintf(stdout, "  %-9s  %8d  old ranges kept as they were\n", "unchanged", d.Unchanged)
	fmt.Fprintf(stdout, "  %-9s  %8d  old ranges cut into %d new ones\n", "split", d.Split, d.Parts)
	fmt.Fprintf(stdout, "  %-9s  %8d  old ranges joined into %d new ones\n", "merged", d.Merged, d.MergedInto)
	fmt.Fprintf(stdout, "  %-9s  %8d  old ranges gone\n", "removed", d.Removed)
	fmt.Fprintf(stdout, "  %-9s  %8d  new ranges\n", "added", d.Added)
	if len(d.Examples) > 0 {
		fmt.Fprintln(stdout, "examples:")
	}
	for _, e := range d.Examples {
		switch {
		case len(e.Old) == 0:
			fmt.Fprintf(stdout, "  %-9s  %s\n", e.Kind, strings.Join(rangeStrings(e.New), " "))
		case len(e.New) == 0:
			fmt.Fprintf(stdout, "  %-9s  %s\n", e.Kind, strings.Join(rangeStrings(e.Old), " "))
		default:
			fmt.Fprintf(stdout, "  %-9s  %s -> %s\n", e.Kind, strings.Join(rangeStrings(e.Old), " "), strings.Join(rangeStrings(e.New), " "))
		}
	}
	return nil
}

func subnetKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet keygen", "--out FILE", stderr)
	out := fs.String("out", "", "write the new release key to `FILE` (mode 0600; never overwritten)")
	if err := parseArgs(fs, args, func(n int) bool { return *out != "" && n == 0 }, "--out FILE and nothing else"); err != nil {
		return err
	}
	file, pub, err := subnet.NewReleaseKey()
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := fh.Write(file); err != nil {
		return errors.Join(err, fh.Close(), os.Remove(*out))
	}
	if err := fh.Close(); err != nil {
		return errors.Join(err, os.Remove(*out))
	}
	fmt.Fprintf(stdout, "wrote %s; nodes that accept its releases list its public key:\nsnapshot_keys = [%q]\n", *out, subnet.FormatReleaseKey(pub))
	return nil
}

// parseSnapshotID reads a snapshot id given as 64 hex digits, a snapshot
// file or builtinSnapshot.
func parseSnapshotID(s string) (subnet.SnapshotID, error) {
	var id subnet.SnapshotID
	if b, err := hex.DecodeString(s); err == nil && len(b) == len(id) {
		copy(id[:], b)
		return id, nil
	}
	t, err := loadSnapshotArg(s)
	if err != nil {
		return id, err
	}
	return t.ID(), nil
}

// parseActivation reads an activation time: RFC 3339, or a duration from
// now.
func parseActivation(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: --activate %q is neither an RFC 3339 time nor a duration", errUsage, s)
	}
	return t, nil
}

func subnetPublish(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet publish", "--key FILE --parent OLD [flags] SNAPSHOT", stderr)
	keyFile := fs.String("key", "", "sign with the release key in `FILE` (micra subnet keygen)")
	parent := fs.String("parent", "", "the snapshot the release replaces: a `file`, \"builtin\" or its id")
	activate := fs.String("activate", "24h", "when nodes switch: an RFC 3339 `time` or a duration from now")
	out := fs.String("out", "", "write the release to `FILE` (default: SNAPSHOT.release)")
	if err := parseArgs(fs, args, func(n int) bool { return n == 1 && *keyFile != "" && *parent != "" }, "--key, --parent and one snapshot are needed"); err != nil {
		return err
	}
	now := time.Now()
	act, err := parseActivation(*activate, now)
	if err != nil {
		return err
	}
	pem, err := readBounded(*keyFile, 1<<16)
	if err != nil {
		return err
	}
	key, err := subnet.ParseReleaseKeyFile(pem)
	if err != nil {
		return fmt.Errorf("%s: %w", *keyFile, err)
	}
	parentID, err := parseSnapshotID(*parent)
	if err != nil {
		return fmt.Errorf("--parent: %w", err)
	}
	data, err := readBounded(fs.Arg(0), subnet.MaxSnapshotSize)
	if err != nil {
		return err
	}
	r, enc, err := subnet.NewRelease(key, data, parentID, now, act)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if *out == "" {
		*out = fs.Arg(0) + ".release"
	}
	if err := os.WriteFile(*out, enc, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	printRelease(stdout, r)
	return nil
}

func subnetOffer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet offer", "[flags] RELEASE SNAPSHOT", stderr)
	addr := fs.String("dashboard", node.DefaultConfig().Dashboard, "`ADDR` of the dashboard of the node that spreads the release (also $MICRA_DASHBOARD)")
	token := fs.String("token", "", "the dashboard's `TOKEN`, if it has one (also $MICRA_DASHBOARD_TOKEN)")
	if err := parseArgs(fs, args, exactly(2), "a release and its snapshot file are needed"); err != nil {
		return err
	}
	a, tok := dashboardTarget(fs, *addr, *token)
	rel, err := readBounded(fs.Arg(0), subnet.ReleaseSize)
	if err != nil {
		return err
	}
	file, err := readBounded(fs.Arg(1), subnet.MaxSnapshotSize)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a+"/api/release", bytes.NewReader(append(rel, file...)))
	if err != nil {
		return fmt.Errorf("%w: --dashboard %q: %v", errUsage, a, err)
	}
	req.Header.Set("Content-Type", node.ReleaseContentType)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("no node answers at %s (is \"micra node\" running, with --dashboard %s?): %w", a, a, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%s refused the release: %s: %s", a, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "the node at %s took the release and spreads it\n", a)
	return nil
}

func printRelease(w io.Writer, r subnet.Release) {
	fmt.Fprintf(w, "snapshot    %s (%s)\nreplaces    %s\npublished   %s\nactivation  %s\nsigned by   %s\n",
		r.Snapshot, humanBytes(int64(r.Size)), r.Parent, r.Published.Format(time.RFC3339),
		r.Activation.Format(time.RFC3339), subnet.FormatReleaseKey(r.Key))
}

func subnetVerify(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("subnet verify", "--keys KEY[,KEY...] RELEASE [SNAPSHOT]", stderr)
	keyList := fs.String("keys", "", "trusted release `keys`, comma-separated (ed25519:BASE64, as keygen prints)")
	if err := parseArgs(fs, args, func(n int) bool { return n >= 1 && n <= 2 && *keyList != "" }, "--keys and a release (and optionally its snapshot) are needed"); err != nil {
		return err
	}
	var keys []ed25519.PublicKey
	for _, s := range strings.Split(*keyList, ",") {
		k, err := subnet.ParseReleaseKey(s)
		if err != nil {
			return fmt.Errorf("%w: --keys: %v", errUsage, err)
		}
		keys = append(keys, k)
	}
	enc, err := readBounded(fs.Arg(0), subnet.ReleaseSize+1)
	if err != nil {
		return err
	}
	r, err := subnet.DecodeRelease(enc, keys)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if err := r.Check(r.Parent, time.Now()); err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	if fs.NArg() == 2 {
		data, err := readBounded(fs.Arg(1), subnet.MaxSnapshotSize)
		if err != nil {
			return err
		}
		if err := r.CheckFile(data); err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(1), err)
		}
		t, err := subnet.DecodeSnapshot(data)
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(1), err)
		}
		if t.ID() != r.Snapshot {
			return fmt.Errorf("%s: %w: snapshot %s, the release names %s", fs.Arg(1), subnet.ErrReleaseFile, t.ID().Short(), r.Snapshot.Short())
		}
	}
	fmt.Fprintln(stdout, "release verified")
	printRelease(stdout, r)
	return nil
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, subnet.ErrTooLarge, limit)
	}
	return data, nil
}
