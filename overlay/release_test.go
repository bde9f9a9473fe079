package overlay

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsub_pb "github.com/libp2p/go-libp2p-pubsub/pb"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// nextSnapshot returns a snapshot file of the test tree with one more
// allocation (127.4.0.0/16) and enough assignments that the file takes
// several chunks.
func nextSnapshot(t testing.TB) []byte {
	t.Helper()
	iana := "2|iana|20240101|1|19700101|20240101|+0000\niana||ipv4|127.0.0.0|16777216|19810901|arin\n"
	var b strings.Builder
	b.WriteString("2.3|arin|20240101|1|19700101|20240101|+0000\n")
	for a := range 5 {
		fmt.Fprintf(&b, "arin|US|ipv4|127.%d.0.0|65536|20200101|allocated|org-%d\n", a, a)
		for c := range 256 {
			fmt.Fprintf(&b, "arin|US|ipv4|127.%d.%d.0|256|20200101|assigned|org-%d\n", a, c, a)
		}
	}
	// Organisations of their own with random names make the file
	// incompressible enough to span chunks.
	var name [12]byte
	for a := 8; a < 248; a++ {
		for c := range 256 {
			rand.Read(name[:])
			fmt.Fprintf(&b, "arin|US|ipv4|127.%d.%d.0|256|20200101|assigned|%x\n", a, c, name)
		}
	}
	return snapshotFile(t, iana, b.String())
}

// snapshotFile builds a tree from inputs (any format) and returns its
// snapshot file.
func snapshotFile(t testing.TB, inputs ...string) []byte {
	t.Helper()
	bld, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		if _, err := bld.Add(context.Background(), fmt.Sprint("input", i), strings.NewReader(in), subnet.FormatAuto); err != nil {
			t.Fatal(err)
		}
	}
	tr, _, err := bld.Build()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tr.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// signedRelease signs a release of file replacing the test tree, published
// now and activating in an hour.
func signedRelease(t testing.TB, key ed25519.PrivateKey, file []byte) (subnet.Release, []byte) {
	t.Helper()
	now := time.Now()
	r, raw, err := subnet.NewRelease(key, file, mustTree(t).ID(), now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return r, raw
}

func releaseKeys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// TestReleaseSpread: a release published by one node reaches every node
// that trusts its key; each fetches the snapshot file within the spread,
// checks it and serves it; a node with other keys refuses the release; a
// node that joins later finds it from its peers; a peer that serves wrong
// bytes is dropped and another asked; a restarted node knows the release
// and its file.
func TestReleaseSpread(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		pub, priv := releaseKeys(t)
		otherPub, _ := releaseKeys(t)
		timing := ReleaseTiming(20*time.Second, 30*time.Second)
		nodes := make([]*node, 6)
		dirs := make([]string, 5)
		for i := range 5 {
			dirs[i] = t.TempDir()
			nodes[i] = r.node(i, ReleaseKeys(dirs[i], pub), timing)
		}
		nodes[5] = r.node(5, ReleaseKeys(t.TempDir(), otherPub), timing) // trusts another key
		joinSwarm(t, nodes)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()

		file := nextSnapshot(t)
		if len(file) <= releaseChunk {
			t.Fatalf("snapshot file of %d bytes: the test wants several chunks", len(file))
		}
		rel, raw := signedRelease(t, priv, file)
		if err := nodes[0].o.PublishRelease(ctx, raw[:len(raw)-1], file); err == nil {
			t.Fatal("a truncated release was published")
		}
		if err := nodes[0].o.PublishRelease(ctx, raw, file[:len(file)-1]); !errors.Is(err, subnet.ErrReleaseFile) {
			t.Fatalf("a release with a truncated file: %v, want ErrReleaseFile", err)
		}
		if err := nodes[0].o.PublishRelease(ctx, raw, file); err != nil {
			t.Fatal(err)
		}
		ready := func(nd *node) error {
			st, ok := nd.o.NextRelease()
			if !ok || !st.Ready || st.Release.Snapshot != rel.Snapshot {
				return fmt.Errorf("%s: release %v ready %v", nd.addr, ok, st.Ready)
			}
			return nil
		}
		for _, nd := range nodes[:5] {
			eventually(t, time.Minute, func() error { return ready(nd) })
			tr, err := nd.o.ReleasedTree()
			if err != nil || tr.ID() != rel.Snapshot {
				t.Fatalf("%s: released tree %v", nd.addr, err)
			}
		}
		var fetched int64
		for _, nd := range nodes[1:5] {
			fetched += nd.o.Stats().ReleaseBytes
		}
		if fetched != 4*int64(len(file)) {
			t.Errorf("four nodes fetched %d bytes, want 4 × %d", fetched, len(file))
		}
		// The node trusting another key refuses the release when it
		// reaches it (in the mesh, or by gossip a heartbeat later).
		eventually(t, time.Minute, func() error {
			if nodes[5].o.Stats().ReleasesRefused == 0 {
				return errors.New("the node trusting another key has refused nothing yet")
			}
			return nil
		})
		if _, ok := nodes[5].o.NextRelease(); ok {
			t.Error("the node trusting another key took the release")
		}

		// A node that joins now finds the release from its peers and
		// fetches the file.
		late := r.node(6, ReleaseKeys(t.TempDir(), pub), timing)
		joinSwarm(t, []*node{nodes[0], late})
		eventually(t, 2*time.Minute, func() error { return ready(late) })

		// A peer that serves other bytes is dropped: a fresh node whose
		// only announced holder lies asks an honest peer next.
		liar := r.node(7, ReleaseKeys(t.TempDir(), pub), timing)
		fresh := r.node(8, ReleaseKeys(t.TempDir(), pub), ReleaseTiming(time.Hour, time.Hour))
		joinSwarm(t, []*node{nodes[0], liar, fresh})
		liar.o.considerRelease(rel, raw, "")
		corrupt := bytes.Clone(file)
		corrupt[len(corrupt)/2] ^= 0xff
		if err := liar.o.storeReleaseFile(rel, corrupt); err != nil {
			t.Fatal(err)
		}
		fresh.o.considerRelease(rel, raw, liar.h.ID())
		if err := fresh.o.fetchRelease(ctx, rel); err != nil {
			t.Fatal(err)
		}
		if err := ready(fresh); err != nil || fresh.o.Stats().ReleaseBadPeers != 1 {
			t.Fatalf("after a lying holder: %v, %d bad peers", err, fresh.o.Stats().ReleaseBadPeers)
		}
		if tr, err := fresh.o.ReleasedTree(); err != nil || tr.ID() != rel.Snapshot {
			t.Fatalf("released tree after a lying holder: %v", err)
		}

		// A restarted node (a new overlay on the same database) knows the
		// release and its stored file.
		nd := nodes[2]
		nd.o.Close()
		o2, err := New(nd.h, mustTree(t), nd.db, append(swarmOpts(), WithDelegator(nd.del), ReleaseKeys(dirs[2], pub))...)
		if err != nil {
			t.Fatal(err)
		}
		defer o2.Close()
		if st, ok := o2.NextRelease(); !ok || !st.Ready || st.Release.Snapshot != rel.Snapshot {
			t.Fatalf("after a restart: %+v %v", st, ok)
		}

		// A node restarted with its stored file damaged drops it and
		// fetches it again.
		nd = nodes[3]
		nd.o.Close()
		path := filepath.Join(dirs[3], releaseFileName(rel.Snapshot))
		if err := os.WriteFile(path, corrupt, 0o644); err != nil {
			t.Fatal(err)
		}
		o3, err := New(nd.h, mustTree(t), nd.db, append(swarmOpts(), WithDelegator(nd.del), ReleaseKeys(dirs[3], pub), timing)...)
		if err != nil {
			t.Fatal(err)
		}
		defer o3.Close()
		if st, ok := o3.NextRelease(); !ok || st.Ready {
			t.Fatalf("restart with a damaged file: release %v, ready %v", ok, st.Ready)
		}
		eventually(t, 2*time.Minute, func() error {
			if st, _ := o3.NextRelease(); !st.Ready {
				return errors.New("not fetched again")
			}
			return nil
		})
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, file) {
			t.Fatalf("the file fetched again differs: %v", err)
		}
	})
}

// TestReleaseRefused: the topic validator and the DHT validator refuse
// every bad release, each case on its own, and count it.
func TestReleaseRefused(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		pub, priv := releaseKeys(t)
		_, otherPriv := releaseKeys(t)
		nd := r.node(0, ReleaseKeys(t.TempDir(), pub))
		file := nextSnapshot(t)
		rel, raw := signedRelease(t, priv, file)
		_, foreign := signedRelease(t, otherPriv, file)
		sign := func(r subnet.Release) []byte {
			r.Key = pub
			b := append([]byte("MICRARL\n\x01"), r.Snapshot[:]...)
			b = append(b, r.Parent[:]...)
			for _, v := range []uint64{uint64(r.Published.Unix()), uint64(r.Activation.Unix()), r.Size} {
				b = append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
			}
			b = append(b, r.FileHash[:]...)
			b = append(b, pub...)
			return append(b, ed25519.Sign(priv, b)...)
		}
		past, future, huge := rel, rel, rel
		past.Activation = rel.Published.Add(-time.Minute)
		future.Published, future.Activation = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
		huge.Size = maxReleaseFile + 1
		if _, err := subnet.DecodeRelease(sign(rel), []ed25519.PublicKey{pub}); err != nil {
			t.Fatalf("the test's own signing is wrong: %v", err)
		}
		tampered := bytes.Clone(raw)
		tampered[20] ^= 1
		v := releaseValidator{keys: []ed25519.PublicKey{pub}}
		if err := v.Validate(ReleaseKey(rel.Parent), raw); err != nil {
			t.Fatalf("a good release record: %v", err)
		}
		for _, c := range []struct {
			name string
			raw  []byte
		}{
			{"truncated", raw[:len(raw)-1]},
			{"oversized", append(bytes.Clone(raw), 0)},
			{"unsigned", append(bytes.Clone(raw[:len(raw)-64]), make([]byte, 64)...)},
			{"another key", foreign},
			{"tampered", tampered},
			{"activation before publication", sign(past)},
			{"published in the future", sign(future)},
			{"file too large", sign(huge)},
		} {
			// One case at a time (t.Run cannot run inside a bubble).
			before := nd.o.Stats().ReleasesRefused
			m := &pubsub.Message{Message: &pubsub_pb.Message{Data: c.raw}}
			if res := nd.o.validateRelease(t.Context(), nd.h.ID(), m); res != pubsub.ValidationReject {
				t.Errorf("%s: topic validator: %v", c.name, res)
			}
			if nd.o.Stats().ReleasesRefused != before+1 {
				t.Errorf("%s: refusal not counted", c.name)
			}
			if c.name != "file too large" && v.Validate(ReleaseKey(rel.Parent), c.raw) == nil {
				t.Errorf("%s: DHT validator accepted it", c.name)
			}
		}
		if err := v.Validate(ReleaseKey(rel.Snapshot), raw); err == nil {
			t.Error("a release under another snapshot's key passed the DHT validator")
		}
		if _, ok := nd.o.NextRelease(); ok {
			t.Error("a refused release was taken")
		}
		// A node without release keys takes none.
		keyless := r.node(1)
		if err := keyless.o.PublishRelease(t.Context(), raw, file); !errors.Is(err, subnet.ErrUntrustedRelease) {
			t.Errorf("publishing on a node without release keys: %v", err)
		}
		// A release replacing another snapshot is not this node's next.
		other := rel
		other.Parent = subnet.SnapshotID{9}
		if nd.o.considerRelease(other, sign(other), "") {
			t.Error("a release replacing another snapshot was taken")
		}
		if err := nd.o.PublishRelease(t.Context(), sign(other), file); !errors.Is(err, subnet.ErrReleaseParent) {
			t.Errorf("publishing a release of another snapshot: %v, want ErrReleaseParent", err)
		}

		// Chunk and release queries with bad fields, for files this node
		// does not have, and beyond the per-peer budget.
		if err := nd.o.PublishRelease(t.Context(), raw, file); err != nil {
			t.Fatal(err)
		}
		chunk := func(id []byte, off uint64, n uint32) error {
			req := newMsg(pb.Message_CHUNK_QUERY)
			req.ChunkQuery = &pb.ChunkQuery{Snapshot: id, Offset: off, Length: n}
			_, err := nd.o.handleChunkQuery(t.Context(), "asker", req)
			return err
		}
		for _, c := range []struct {
			name string
			id   []byte
			off  uint64
			n    uint32
			want error
		}{
			{"short id", rel.Snapshot[:31], 0, 10, ErrMalformed},
			{"unaligned offset", rel.Snapshot[:], 1, 10, ErrMalformed},
			{"no length", rel.Snapshot[:], 0, 0, ErrMalformed},
			{"over a chunk", rel.Snapshot[:], 0, releaseChunk + 1, ErrMalformed},
			{"beyond the file", rel.Snapshot[:], 64 * releaseChunk, 10, ErrMalformed},
			{"unknown file", make([]byte, 32), 0, 10, ErrNotFound},
		} {
			if err := chunk(c.id, c.off, c.n); !errors.Is(err, c.want) {
				t.Errorf("chunk query, %s: %v, want %v", c.name, err, c.want)
			}
		}
		var over error
		for range chunkBurst + 1 {
			if over = chunk(rel.Snapshot[:], releaseChunk, releaseChunk); over != nil {
				break
			}
		}
		if !errors.Is(over, ErrOverloaded) {
			t.Errorf("chunk queries beyond the budget: %v, want ErrOverloaded", over)
		}
		q := newMsg(pb.Message_RELEASE_QUERY)
		q.ReleaseQuery = &pb.ReleaseQuery{Parent: rel.Snapshot[:]}
		if _, err := nd.o.handleReleaseQuery(t.Context(), "asker", q); !errors.Is(err, ErrNotFound) {
			t.Errorf("release query for an unknown parent: %v", err)
		}
		q.ReleaseQuery.Parent = rel.Parent[:]
		if m, err := nd.o.handleReleaseQuery(t.Context(), "asker", q); err != nil || !bytes.Equal(m.GetRelease().GetRelease(), raw) {
			t.Errorf("release query: %v", err)
		}
	})
}

func FuzzReleaseValidator(f *testing.F) {
	pub, priv := releaseKeys(f)
	now := time.Now()
	parent := subnet.SnapshotID{7}
	file := nextSnapshotSmall(f)
	r, raw, err := subnet.NewRelease(priv, file, parent, now, now.Add(time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ReleaseKey(r.Parent), raw)
	f.Add("/micra-release/00", []byte("MICRARL\n"))
	v := releaseValidator{keys: []ed25519.PublicKey{pub}}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if v.Validate(key, value) == nil && (key != ReleaseKey(r.Parent) || !bytes.Equal(value, raw)) {
			t.Fatal("a release the fuzzer made up passed")
		}
		if i, err := v.Select(key, [][]byte{value, raw}); err == nil && i == 0 && !bytes.Equal(value, raw) {
			t.Fatal("Select chose an invalid value")
		}
	})
}

// nextSnapshotSmall is a snapshot file other than the test tree's, small.
func nextSnapshotSmall(t testing.TB) []byte {
	return snapshotFile(t, "inetnum: 10.0.0.0 - 10.0.0.255\nnetname: N\nsource: RIPE\n")
}
