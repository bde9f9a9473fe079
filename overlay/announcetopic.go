package overlay

import (
	"context"
	"fmt"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// The deprecated announcement topic (TopicAnnounce). Nodes of the previous
// release flood their announcements there; this build reads them, for one
// release, so that those nodes stay candidates, and publishes nothing.
// Delete this file, and the topic's join in New, in the next release.

// decodeAnnounce decodes and checks an announcement published on the
// topic.
func decodeAnnounce(sid []byte, data []byte, now time.Time) (announcement, error) {
	if len(data) > maxAnnounceMsg {
		return announcement{}, fmt.Errorf("%w: announcement of %d bytes", ErrTooLarge, len(data))
	}
	var a pb.Announce
	if err := proto.Unmarshal(data, &a); err != nil {
		return announcement{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return checkAnnounce(sid, &a, now)
}

// validateAnnounce accepts announcements that decode, are for our snapshot,
// are recent, and come from their author (pubsub's strict signing makes the
// author authentic).
func (o *Overlay) validateAnnounce(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	if _, err := decodeAnnounce(o.sid[:], m.GetData(), time.Now()); err != nil {
		o.log.Debug("announcement rejected", "peer", from, "error", err)
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

// readAnnouncements keeps the announcements older nodes publish on the
// topic, as it keeps those exchanged (noteAnnounce), until Close.
func (o *Overlay) readAnnouncements(sub *pubsub.Subscription) {
	defer sub.Cancel()
	for {
		m, err := sub.Next(o.ctx)
		if err != nil {
			return
		}
		if a, err := decodeAnnounce(o.sid[:], m.GetData(), time.Now()); err == nil {
			o.noteAnnounce(m.GetFrom(), a)
		}
	}
}
