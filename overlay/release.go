package overlay

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/kv"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// Releases. A network moves to new registry data by a signed release
// (subnet.Release): which snapshot replaces which, and when. This file
// spreads releases and their snapshot files; switching to the new snapshot
// at the activation time is the node's.
//
//   - A release travels on TopicRelease and as a DHT record under
//     ReleaseNamespace keyed by the snapshot it replaces, so that a node
//     that was offline finds the release after its own snapshot. Both
//     accept only releases signed by a configured key (ReleaseKeys), with
//     sane times; a refused release is counted (Stats.ReleasesRefused) and
//     never stored.
//   - A node that sees the release replacing the snapshot it runs waits a
//     random part of the spread (so that a network does not fetch from the
//     publisher at once), then fetches the file in chunks over ReleaseID
//     from peers that announce holding it, then from any connected peer.
//     The file is checked against the release's size and hash and decoded
//     before it is stored; a peer that serves other bytes is not asked again
//     for that release. Once stored, the node serves the file and says so in
//     its announcements, to its neighbours at once (announceSoon), so the
//     news spreads along the routing tables as fast as the files do.
//   - A node keeps at most two snapshot files, in its release directory
//     (ReleaseDir; files, not badger values, since a snapshot is megabytes):
//     the one it runs (when it came from a release) and the next.
const (
	// releaseChunk is the piece of a snapshot file one CHUNK carries.
	releaseChunk = 512 << 10
	// maxReleaseFile bounds a released snapshot file fetched from peers;
	// the whole real registry data encodes to about 15 MB.
	maxReleaseFile = 64 << 20
	// maxReleaseHolders bounds the peers remembered as holding the next
	// release's file.
	maxReleaseHolders = 256
	// maxReleaseTries bounds the peers asked for a file in one round.
	maxReleaseTries = 8
	// releaseRetry is the wait before another round after a failed one.
	releaseRetry = 30 * time.Second
	// Per-peer budget of chunk requests: a whole real snapshot (30 chunks)
	// at once, then two chunks a second.
	chunkRate, chunkBurst = 2, 64
)

// ReleaseKey returns the DHT key of the release replacing the snapshot
// parent: "/micra-release/<hex parent id>".
func ReleaseKey(parent subnet.SnapshotID) string {
	return "/" + ReleaseNamespace + "/" + hex.EncodeToString(parent[:])
}

// releaseState is what a node knows of the release replacing the snapshot
// it runs. Guarded by mu.
type releaseState struct {
	mu      sync.Mutex
	next    *subnet.Release
	ready   bool      // next's file is stored and verified
	fetchAt time.Time // when to fetch next's file (a random part of the spread)
	holders map[peer.ID]struct{}
	bad     map[peer.ID]struct{}
	wake    chan struct{}
	chunks  *peerLimiter
}

func newReleaseState() *releaseState {
	return &releaseState{
		holders: map[peer.ID]struct{}{}, bad: map[peer.ID]struct{}{},
		wake: make(chan struct{}, 1), chunks: newPeerLimiter(chunkRate, chunkBurst),
	}
}

func (s *releaseState) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ReleaseStatus is what a node knows of the release replacing the
// snapshot it runs.
type ReleaseStatus struct {
	Release subnet.Release
	Ready   bool // the file is stored and verified: the node can switch
	Holders int  // peers that announced holding the file
}

// NextRelease returns the release replacing the snapshot this node runs,
// when it knows one.
func (o *Overlay) NextRelease() (ReleaseStatus, bool) {
	s := o.rel
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		return ReleaseStatus{}, false
	}
	return ReleaseStatus{Release: *s.next, Ready: s.ready, Holders: len(s.holders)}, true
}

// ReleasedTree decodes the stored file of the next release.
func (o *Overlay) ReleasedTree() (*subnet.Tree, error) {
	st, ok := o.NextRelease()
	if !ok || !st.Ready {
		return nil, fmt.Errorf("%w: no next release stored", ErrNotFound)
	}
	data, err := o.readReleaseFile(st.Release.Snapshot)
	if err != nil {
		return nil, err
	}
	return subnet.DecodeSnapshot(data)
}

// openRelease decodes a release from the network and checks its signature
// and times; every refusal is counted.
func (o *Overlay) openRelease(raw []byte) (subnet.Release, error) {
	r, err := subnet.DecodeRelease(raw, o.cfg.releaseKeys)
	if err == nil {
		err = r.Check(r.Parent, time.Now())
	}
	if err == nil && r.Size > maxReleaseFile {
		err = fmt.Errorf("%w: snapshot file of %d bytes (at most %d)", ErrTooLarge, r.Size, maxReleaseFile)
	}
	if err != nil {
		o.stats.releasesRefused.Add(1)
		return subnet.Release{}, err
	}
	return r, nil
}

// validateRelease is the release topic's validator: only signed releases
// with sane times pass on.
func (o *Overlay) validateRelease(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	if len(m.GetData()) != subnet.ReleaseSize {
		o.stats.releasesRefused.Add(1)
		o.log.Debug("release refused", "peer", from, "error", fmt.Sprintf("%d bytes", len(m.GetData())))
		return pubsub.ValidationReject
	}
	if _, err := o.openRelease(m.GetData()); err != nil {
		o.log.Info("release refused", "peer", from, "error", err)
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

func (o *Overlay) readReleases(sub *pubsub.Subscription) {
	defer sub.Cancel()
	for {
		m, err := sub.Next(o.ctx)
		if err != nil {
			return
		}
		r, err := subnet.DecodeRelease(m.GetData(), o.cfg.releaseKeys) // validated: cannot fail
		if err != nil {
			continue
		}
		o.considerRelease(r, m.GetData(), m.GetFrom())
	}
}

// considerRelease takes r as the next release when it replaces the
// snapshot this node runs and no other release does, or r is newer than
// the one known (a publisher's correction: the later publication wins,
// then the greater snapshot id). from, when set, holds the file.
func (o *Overlay) considerRelease(r subnet.Release, raw []byte, from peer.ID) bool {
	if r.Parent != o.sid {
		return false
	}
	s := o.rel
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next != nil && s.next.Snapshot == r.Snapshot {
		if from != "" && from != o.h.ID() && len(s.holders) < maxReleaseHolders {
			s.holders[from] = struct{}{}
		}
		return false
	}
	if s.next != nil && !newerRelease(r, *s.next) {
		return false
	}
	if err := o.db.Update(func(txn *badger.Txn) error { return txn.Set(releaseKey(r.Parent), raw) }); err != nil {
		o.log.Warn("release not stored", "error", err)
		return false
	}
	if s.next != nil {
		o.log.Warn("release replaced by a newer one for the same snapshot", "old", s.next.Snapshot.Short(), "new", r.Snapshot.Short())
		o.dropReleaseFile(s.next.Snapshot)
	}
	s.next, s.ready = &r, false
	clear(s.holders)
	clear(s.bad)
	if from != "" && from != o.h.ID() {
		s.holders[from] = struct{}{}
	}
	spread := o.cfg.releaseSpread
	if left := time.Until(r.Activation) / 2; left < spread {
		spread = max(left, 0)
	}
	s.fetchAt = time.Now().Add(time.Duration(rand.Int64N(int64(spread) + 1)))
	o.log.Info("release seen", "snapshot", r.Snapshot.Short(), "activation", r.Activation.Format(time.RFC3339), "fetch_at", s.fetchAt.Format(time.RFC3339))
	s.poke()
	return true
}

func newerRelease(a, b subnet.Release) bool {
	if !a.Published.Equal(b.Published) {
		return a.Published.After(b.Published)
	}
	return bytes.Compare(a.Snapshot[:], b.Snapshot[:]) > 0
}

// loadReleases restores the next release and whether its file is stored,
// after a restart. The file was decoded when it was stored; its hash says
// whether it is still the same.
func (o *Overlay) loadReleases() error {
	raw, found, err := kv.Load(o.db, releaseKey(o.sid))
	if err != nil || !found {
		return err
	}
	r, err := subnet.DecodeRelease(raw, o.cfg.releaseKeys)
	if err != nil {
		o.log.Warn("stored release no longer trusted", "error", err)
		return nil
	}
	s := o.rel
	s.next, s.fetchAt = &r, time.Now()
	if file, err := o.readReleaseFile(r.Snapshot); err == nil {
		if err := r.CheckFile(file); err != nil {
			o.log.Warn("stored release file damaged; fetching it again", "snapshot", r.Snapshot.Short(), "error", err)
			o.dropReleaseFile(r.Snapshot)
		} else {
			s.ready = true
		}
	}
	return nil
}

// PublishRelease makes this node the first holder of a release: raw is the
// signed release, file its snapshot file. Both are checked as a received
// release is (the release must replace the snapshot this node runs); the
// file is stored and served, and the release published on TopicRelease and
// put in the DHT.
func (o *Overlay) PublishRelease(ctx context.Context, raw, file []byte) error {
	if o.releases == nil {
		return fmt.Errorf("%w: this node takes no releases (no release keys)", subnet.ErrUntrustedRelease)
	}
	r, err := o.openRelease(raw)
	if err != nil {
		return err
	}
	if r.Parent != o.sid {
		return fmt.Errorf("%w: it replaces %s, this node runs %s", subnet.ErrReleaseParent, r.Parent.Short(), o.sid.Short())
	}
	if err := checkReleaseFile(r, file); err != nil {
		return err
	}
	o.considerRelease(r, raw, "")
	if st, ok := o.NextRelease(); !ok || st.Release.Snapshot != r.Snapshot {
		return fmt.Errorf("%w: a newer release replacing %s is known (snapshot %s)", ErrForbidden, r.Parent.Short(), st.Release.Snapshot.Short())
	}
	if err := o.storeReleaseFile(r, file); err != nil {
		return err
	}
	if err := o.releases.Publish(ctx, raw); err != nil {
		return fmt.Errorf("publishing the release: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, coordDeadline)
	defer cancel()
	if err := o.dht.PutValue(pctx, ReleaseKey(r.Parent), raw); err != nil {
		o.log.Warn("release not put in the DHT", "error", err)
	}
	return nil
}

// checkReleaseFile checks that file is r's snapshot file and decodes.
func checkReleaseFile(r subnet.Release, file []byte) error {
	if err := r.CheckFile(file); err != nil {
		return err
	}
	t, err := subnet.DecodeSnapshot(file)
	if err != nil {
		return fmt.Errorf("%w: %w", subnet.ErrReleaseFile, err)
	}
	if t.ID() != r.Snapshot {
		return fmt.Errorf("%w: the file holds snapshot %s, the release names %s", subnet.ErrReleaseFile, t.ID().Short(), r.Snapshot.Short())
	}
	return nil
}

// releaseLoop fetches the next release's file when it is due, and looks
// for a release when none is known, every releaseCheck.
func (o *Overlay) releaseLoop() {
	s := o.rel
	t := time.NewTimer(time.Duration(float64(o.cfg.releaseCheck) * (0.5 + randFloat()/2)))
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
		wait := o.cfg.releaseCheck
		s.mu.Lock()
		next, ready, at := s.next, s.ready, s.fetchAt
		s.mu.Unlock()
		switch {
		case next == nil:
			o.lookForRelease(o.ctx)
		case ready:
		case time.Now().Before(at):
			wait = time.Until(at)
		default:
			if err := o.fetchRelease(o.ctx, *next); err != nil {
				o.log.Info("release file not fetched", "snapshot", next.Snapshot.Short(), "error", err)
				wait = min(releaseRetry, wait)
			}
		}
		t.Reset(wait) // since Go 1.23 a reset timer delivers no stale tick
	}
}

// lookForRelease asks a few connected peers, then the DHT, for the release
// replacing the snapshot this node runs.
func (o *Overlay) lookForRelease(ctx context.Context) {
	ps := o.h.Network().Peers()
	rand.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	for _, p := range ps[:min(len(ps), 3)] {
		req := newMsg(pb.Message_RELEASE_QUERY)
		req.ReleaseQuery = &pb.ReleaseQuery{Parent: o.sid[:]}
		resp, err := o.request(ctx, p, releaseSpec, req, pb.Message_RELEASE)
		if err != nil {
			continue
		}
		raw := resp.GetRelease().GetRelease()
		if r, err := o.openRelease(raw); err == nil && o.considerRelease(r, raw, "") {
			return
		} else if err != nil {
			o.log.Info("release refused", "peer", p, "error", err)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, coordDeadline)
	defer cancel()
	raw, err := o.dht.GetValue(gctx, ReleaseKey(o.sid))
	if err != nil {
		return
	}
	if r, err := o.openRelease(raw); err == nil {
		o.considerRelease(r, raw, "")
	}
}

// fetchRelease fetches r's file from the peers that announced holding it,
// then from other connected peers, at most maxReleaseTries of them, and
// stores the first that checks.
func (o *Overlay) fetchRelease(ctx context.Context, r subnet.Release) error {
	s := o.rel
	s.mu.Lock()
	var first, rest []peer.ID
	for p := range s.holders {
		if _, bad := s.bad[p]; !bad {
			first = append(first, p)
		}
	}
	for _, p := range o.h.Network().Peers() {
		_, bad := s.bad[p]
		_, holder := s.holders[p]
		if !bad && !holder {
			rest = append(rest, p)
		}
	}
	s.mu.Unlock()
	rand.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	cands := append(first, rest...)
	if len(cands) == 0 {
		return ErrNoPeers
	}
	var errs []error
	for _, p := range cands[:min(len(cands), maxReleaseTries)] {
		file, err := o.fetchFile(ctx, p, r)
		if err == nil {
			err = checkReleaseFile(r, file)
			if err != nil {
				s.mu.Lock()
				s.bad[p] = struct{}{}
				delete(s.holders, p)
				s.mu.Unlock()
				o.stats.releaseBadPeers.Add(1)
				o.log.Warn("peer served a wrong snapshot file", "peer", p, "snapshot", r.Snapshot.Short(), "error", err)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return o.storeReleaseFile(r, file)
	}
	return errors.Join(errs...)
}

// fetchFile reads r's file from p, chunk by chunk.
func (o *Overlay) fetchFile(ctx context.Context, p peer.ID, r subnet.Release) ([]byte, error) {
	file := make([]byte, 0, r.Size)
	for off := uint64(0); off < r.Size; {
		n := min(uint64(releaseChunk), r.Size-off)
		req := newMsg(pb.Message_CHUNK_QUERY)
		req.ChunkQuery = &pb.ChunkQuery{Snapshot: r.Snapshot[:], Offset: off, Length: uint32(n)}
		resp, err := o.request(ctx, p, releaseSpec, req, pb.Message_CHUNK)
		if err != nil {
			return nil, err
		}
		c := resp.GetChunk()
		if c.GetSize() != r.Size || uint64(len(c.GetData())) != n {
			return nil, fmt.Errorf("%w: chunk of %d bytes of a %d-byte file at %d, want %d of %d", subnet.ErrReleaseFile, len(c.GetData()), c.GetSize(), off, n, r.Size)
		}
		file = append(file, c.GetData()...)
		o.stats.releaseBytes.Add(int64(n))
		off += n
	}
	return file, nil
}

// releaseFileName is the name of a stored snapshot file in the release
// directory: the snapshot id in hex, ".snap".
func releaseFileName(id subnet.SnapshotID) string { return hex.EncodeToString(id[:]) + ".snap" }

// storeReleaseFile writes a checked snapshot file into the release
// directory (a temporary file, synced, then renamed, so that a file under
// its final name is complete), and removes every other stored file but the
// running snapshot's.
func (o *Overlay) storeReleaseFile(r subnet.Release, file []byte) error {
	dir := o.cfg.releaseDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	final := filepath.Join(dir, releaseFileName(r.Snapshot))
	tmp, err := os.CreateTemp(dir, ".fetch-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(file)
	if err == nil {
		err = tmp.Sync()
	}
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), final)
	}
	if err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	for _, id := range o.storedReleaseFiles() {
		if id != r.Snapshot && id != o.sid {
			o.dropReleaseFile(id)
		}
	}
	s := o.rel
	s.mu.Lock()
	ready := s.next != nil && s.next.Snapshot == r.Snapshot
	if ready {
		s.ready = true
	}
	s.mu.Unlock()
	o.log.Info("release file stored", "snapshot", r.Snapshot.Short(), "bytes", len(file), "path", final)
	if ready {
		// The neighbours hear at once that this node serves the file.
		o.announceSoon()
	}
	return nil
}

// storedReleaseFiles lists the snapshots whose files are in the release
// directory.
func (o *Overlay) storedReleaseFiles() []subnet.SnapshotID {
	ents, err := os.ReadDir(o.cfg.releaseDir)
	if err != nil {
		return nil
	}
	var ids []subnet.SnapshotID
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".snap")
		b, err := hex.DecodeString(name)
		if ok && err == nil && len(b) == len(subnet.SnapshotID{}) && e.Type().IsRegular() {
			ids = append(ids, subnet.SnapshotID(b))
		}
	}
	return ids
}

// dropReleaseFile removes a stored file.
func (o *Overlay) dropReleaseFile(id subnet.SnapshotID) {
	err := os.Remove(filepath.Join(o.cfg.releaseDir, releaseFileName(id)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		o.log.Warn("release file not removed", "snapshot", id.Short(), "error", err)
	}
}

// openReleaseFile opens a stored snapshot file and returns its size.
func (o *Overlay) openReleaseFile(id subnet.SnapshotID) (*os.File, int64, error) {
	if o.cfg.releaseDir == "" {
		return nil, 0, fmt.Errorf("%w: this node keeps no snapshot files", ErrNotFound)
	}
	f, err := os.Open(filepath.Join(o.cfg.releaseDir, releaseFileName(id)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: snapshot file %s", ErrNotFound, id.Short())
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, errors.Join(err, f.Close())
	}
	return f, st.Size(), nil
}

// readReleaseFile reads a stored snapshot file, at most maxReleaseFile
// bytes.
func (o *Overlay) readReleaseFile(id subnet.SnapshotID) ([]byte, error) {
	f, size, err := o.openReleaseFile(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxReleaseFile {
		return nil, fmt.Errorf("%w: stored snapshot file of %d bytes", ErrTooLarge, size)
	}
	return io.ReadAll(io.LimitReader(f, maxReleaseFile))
}

// ReleasedSnapshot reads the snapshot file of id kept in the release
// directory dir (ReleaseKeys) and decodes it: a node that switched to a
// released snapshot runs it again after a restart. The file was checked
// against its release when it was stored; its id is checked here again.
func ReleasedSnapshot(dir string, id subnet.SnapshotID) (*subnet.Tree, error) {
	o := &Overlay{cfg: config{releaseDir: dir}}
	data, err := o.readReleaseFile(id)
	if err != nil {
		return nil, err
	}
	t, err := subnet.DecodeSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("snapshot file %s: %w", filepath.Join(dir, releaseFileName(id)), err)
	}
	if t.ID() != id {
		return nil, fmt.Errorf("%w: snapshot file %s holds snapshot %s", subnet.ErrReleaseFile, filepath.Join(dir, releaseFileName(id)), t.ID().Short())
	}
	return t, nil
}

func (o *Overlay) handleReleaseQuery(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	parent := req.GetReleaseQuery().GetParent()
	if len(parent) != len(subnet.SnapshotID{}) {
		return nil, fmt.Errorf("%w: snapshot id of %d bytes", ErrMalformed, len(parent))
	}
	var raw []byte
	err := o.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(releaseKey(subnet.SnapshotID(parent)))
		if err != nil {
			return err
		}
		raw, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: no release replaces %x", ErrNotFound, parent[:6])
	}
	if err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_RELEASE)
	m.Release = &pb.Release{Release: raw}
	return m, nil
}

func (o *Overlay) handleChunkQuery(ctx context.Context, from peer.ID, req *pb.Message) (*pb.Message, error) {
	q := req.GetChunkQuery()
	if len(q.GetSnapshot()) != len(subnet.SnapshotID{}) || q.GetOffset()%releaseChunk != 0 || q.GetLength() == 0 || q.GetLength() > releaseChunk {
		return nil, fmt.Errorf("%w: chunk query (snapshot of %d bytes, offset %d, length %d)", ErrMalformed, len(q.GetSnapshot()), q.GetOffset(), q.GetLength())
	}
	if !o.rel.chunks.allow(from, 1) {
		return nil, fmt.Errorf("%w: chunk requests over budget", ErrOverloaded)
	}
	f, size, err := o.openReleaseFile(subnet.SnapshotID(q.GetSnapshot()))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if q.GetOffset() >= uint64(size) {
		return nil, fmt.Errorf("%w: offset %d beyond the file's %d bytes", ErrMalformed, q.GetOffset(), size)
	}
	data := make([]byte, min(uint64(q.GetLength()), uint64(size)-q.GetOffset()))
	if _, err := f.ReadAt(data, int64(q.GetOffset())); err != nil {
		return nil, err
	}
	m := newMsg(pb.Message_CHUNK)
	m.Chunk = &pb.Chunk{Data: data, Size: uint64(size)}
	return m, nil
}

// releaseValidator checks release records in the DHT: a signed release by
// a configured key, with sane times, under the key of the snapshot it
// replaces. Of several, the newest publication wins.
type releaseValidator struct{ keys []ed25519.PublicKey }

func (v releaseValidator) open(key string, value []byte) (subnet.Release, error) {
	r, err := subnet.DecodeRelease(value, v.keys)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if err := r.Check(r.Parent, time.Now()); err != nil {
		return r, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if key != ReleaseKey(r.Parent) {
		return r, fmt.Errorf("%w: release of %s under %s", ErrBadRecord, r.Parent.Short(), clipKey(key))
	}
	return r, nil
}

// Validate checks a release record; see releaseValidator.
func (v releaseValidator) Validate(key string, value []byte) error {
	if !strings.HasPrefix(key, "/"+ReleaseNamespace+"/") {
		return fmt.Errorf("%w: key %s", ErrBadRecord, clipKey(key))
	}
	_, err := v.open(key, value)
	return err
}

// Select picks the newest valid release.
func (v releaseValidator) Select(key string, values [][]byte) (int, error) {
	best, bestIdx := subnet.Release{}, -1
	for i, val := range values {
		r, err := v.open(key, val)
		if err != nil {
			continue
		}
		if bestIdx < 0 || newerRelease(r, best) {
			best, bestIdx = r, i
		}
	}
	if bestIdx < 0 {
		return 0, fmt.Errorf("%w: no valid release for %s", ErrBadRecord, clipKey(key))
	}
	return bestIdx, nil
}

// releaseAnnounce is the snapshot id this node announces holding the file
// of, or nil.
func (o *Overlay) releaseAnnounce() []byte {
	s := o.rel
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil || !s.ready {
		return nil
	}
	return bytes.Clone(s.next.Snapshot[:])
}

// noteReleaseHolder records that p announced holding the file of the
// snapshot id.
func (o *Overlay) noteReleaseHolder(p peer.ID, id []byte) {
	s := o.rel
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil || !bytes.Equal(id, s.next.Snapshot[:]) || len(s.holders) >= maxReleaseHolders {
		return
	}
	if _, bad := s.bad[p]; !bad {
		s.holders[p] = struct{}{}
	}
}
