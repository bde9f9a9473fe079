package overlay

import pubsub "github.com/libp2p/go-libp2p-pubsub"

// SubscribeResults subscribes to TopicResults. An indexer reads result
// batches from it (results); pubsub refuses a second Join of a
// topic, so the subscription has to come from the handle New joined.
// Cancel the subscription before Close.
func (o *Overlay) SubscribeResults(opts ...pubsub.SubOpt) (*pubsub.Subscription, error) {
	if o.ctx.Err() != nil {
		return nil, ErrClosed
	}
	return o.results.Subscribe(opts...)
}
