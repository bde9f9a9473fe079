package results

import (
	"context"
	"fmt"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/internal/check"
	"github.com/micra-net/micra/results/pb"
	"github.com/micra-net/micra/subnet"
)

// pubsub refuses a second Join of a topic and a second validator, but an
// outbox and an indexer may share one router (an indexer that also
// crawls). joined shares topic handles per router, counting their users.
var joined = struct {
	sync.Mutex
	m map[*pubsub.PubSub]map[string]*joinedTopic
}{m: map[*pubsub.PubSub]map[string]*joinedTopic{}}

type joinedTopic struct {
	t    *pubsub.Topic
	refs int
}

// joinTopic joins name on ps, registering v as its validator on first use.
// release drops this user's reference and closes the topic after the last.
func joinTopic(ps *pubsub.PubSub, name string, v pubsub.ValidatorEx) (t *pubsub.Topic, release func() error, err error) {
	joined.Lock()
	defer joined.Unlock()
	m := joined.m[ps]
	if m == nil {
		m = map[string]*joinedTopic{}
		joined.m[ps] = m
	}
	jt := m[name]
	if jt == nil {
		if v != nil {
			if err := ps.RegisterTopicValidator(name, v); err != nil {
				return nil, nil, err
			}
		}
		t, err := ps.Join(name)
		if err != nil {
			if v != nil {
				_ = ps.UnregisterTopicValidator(name)
			}
			return nil, nil, err
		}
		jt = &joinedTopic{t: t}
		m[name] = jt
	}
	jt.refs++
	var once sync.Once
	release = func() error {
		var err error
		once.Do(func() {
			joined.Lock()
			defer joined.Unlock()
			jt.refs--
			if jt.refs > 0 {
				return
			}
			delete(m, name)
			if len(m) == 0 {
				delete(joined.m, ps)
			}
			err = jt.t.Close()
			if v != nil {
				_ = ps.UnregisterTopicValidator(name)
			}
		})
		return err
	}
	return jt.t, release, nil
}

// JoinTopic joins name, a result topic (Topic) or TopicIndexers, on ps
// with the package's validator for it, registered on first use: result
// messages that OpenEnvelope refuses (with MessageLimit), calling rejected
// (when not nil) for each, or announcements that do not decode. Logger,
// Clock and MessageLimit apply. release drops this user's reference and
// closes the topic after the last; an indexer and an outbox on one host
// share it.
func JoinTopic(ps *pubsub.PubSub, name string, rejected func(), opts ...Option) (t *pubsub.Topic, release func() error, err error) {
	cfg := defaultConfig()
	if err := check.Apply(&cfg, opts); err != nil {
		return nil, nil, err
	}
	if name == TopicIndexers {
		return joinTopic(ps, name, announceValidator(&cfg))
	}
	return joinTopic(ps, name, resultValidator(&cfg, rejected))
}

// IndexerAnnouncement is the message an indexer publishes on
// TopicIndexers: the snapshot and shard layout it takes batches of, the
// shards it takes (nil: all), up to 16 of its addresses, and how long the
// announcement holds.
func IndexerAnnouncement(sid subnet.SnapshotID, shards uint32, take []uint32, addrs []ma.Multiaddr, lifetime time.Duration, now time.Time) ([]byte, error) {
	ttl := max(1, int64((lifetime+time.Second-1)/time.Second))
	a := &pb.Announce{Version: wireVersion, Snapshot: sid[:], Shards: shards, Take: take, AtMs: now.UnixMilli(), TtlS: uint32(min(ttl, int64(MaxAnnounceLifetime/time.Second)))}
	for _, m := range addrs {
		if len(a.Addrs) < maxAnnAddrs {
			a.Addrs = append(a.Addrs, m.Bytes())
		}
	}
	return proto.Marshal(a)
}

// resultValidator rejects result messages that OpenEnvelope refuses with
// the configured message limit, calling rejected (when not nil) for each.
func resultValidator(c *config, rejected func()) pubsub.ValidatorEx {
	return func(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		p, err := OpenEnvelope(m.GetData(), c.limit, c.now())
		if err != nil {
			c.log.Debug("result message rejected", "peer", from, "error", err)
			if rejected != nil {
				rejected()
			}
			return pubsub.ValidationReject
		}
		m.ValidatorData = p
		return pubsub.ValidationAccept
	}
}

// announceValidator rejects announcements that do not decode or are out of
// bounds; which snapshot and shard layout they are for is the reader's
// concern.
func announceValidator(c *config) pubsub.ValidatorEx {
	return func(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		if _, err := decodeAnnounce(m.GetData(), c.now()); err != nil {
			c.log.Debug("indexer announcement rejected", "peer", from, "error", err)
			return pubsub.ValidationReject
		}
		return pubsub.ValidationAccept
	}
}

// decodeAnnounce decodes and checks an indexer announcement received at
// now: its time within 10 min of now, its lists and lifetime bounded.
func decodeAnnounce(data []byte, now time.Time) (*pb.Announce, error) {
	if len(data) == 0 || len(data) > maxAnnounceMsg {
		return nil, fmt.Errorf("%w: announcement of %d bytes", ErrMalformed, len(data))
	}
	var a pb.Announce
	if err := proto.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%w: announcement: %v", ErrMalformed, err)
	}
	if a.GetVersion() != wireVersion {
		return nil, fmt.Errorf("%w: announcement version %d", ErrUnsupportedVersion, a.GetVersion())
	}
	at := time.UnixMilli(a.GetAtMs())
	switch {
	case len(a.GetSnapshot()) != 32:
		return nil, fmt.Errorf("%w: announcement snapshot of %d bytes", ErrMalformed, len(a.GetSnapshot()))
	case a.GetShards() < 1 || a.GetShards() > MaxShards || len(a.GetTake()) > int(a.GetShards()):
		return nil, fmt.Errorf("%w: announcement takes %d of %d shards", ErrMalformed, len(a.GetTake()), a.GetShards())
	case len(a.GetAddrs()) > maxAnnAddrs:
		return nil, fmt.Errorf("%w: announcement with %d addresses", ErrMalformed, len(a.GetAddrs()))
	case a.GetTtlS() < 1 || time.Duration(a.GetTtlS())*time.Second > MaxAnnounceLifetime:
		return nil, fmt.Errorf("%w: announcement lifetime %d s", ErrMalformed, a.GetTtlS())
	case at.After(now.Add(clockSkew)) || at.Before(now.Add(-clockSkew)):
		return nil, fmt.Errorf("%w: announcement time %v", ErrMalformed, at)
	}
	for _, s := range a.GetTake() {
		if s >= a.GetShards() {
			return nil, fmt.Errorf("%w: announcement takes shard %d of %d", ErrMalformed, s, a.GetShards())
		}
	}
	return &a, nil
}
