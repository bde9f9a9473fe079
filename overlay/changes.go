package overlay

import (
	"slices"
	"sync"
	"time"

	"github.com/micra-net/micra/subnet"
)

// SubnetChange is a change of the subnets delegated to this node, with
// why it happened, for the node's operator (its dashboard).
type SubnetChange struct {
	At     time.Time
	Subnet subnet.Range
	Gained bool // delegated to this node; else no longer
	Own    bool // the subnet of the node's own address
	Reason string
}

// maxChanges bounds the changes an overlay keeps: the latest.
const maxChanges = 64

// Reasons of SubnetChange.
const (
	reasonOwnClaimed = "the subnet of this node's address, claimed"
	reasonCarried    = "carried over from the previous snapshot"
	reasonDelegated  = "delegated to this node by its coordinator"
	reasonOwnLost    = "its coordinator no longer lists this node's claim; claimed again"
	reasonLost       = "its coordinator no longer lists it as this node's: taken back, or decided for another node"
)

type changeLog struct {
	mu   sync.Mutex
	list []SubnetChange // oldest first
}

func (l *changeLog) add(c SubnetChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.list) == maxChanges {
		l.list = slices.Delete(l.list, 0, 1)
	}
	l.list = append(l.list, c)
}

// Changes returns the latest changes of the subnets delegated to this
// node (at most 64), newest first. Subnets restored from the database at
// start are not changes.
func (o *Overlay) Changes() []SubnetChange {
	o.changes.mu.Lock()
	out := slices.Clone(o.changes.list)
	o.changes.mu.Unlock()
	slices.Reverse(out)
	return out
}

// gainedReason says why d was delegated to this node.
func gainedReason(d Delegation) string {
	switch {
	case d.Own:
		return reasonOwnClaimed
	case d.CarriedFrom.Valid():
		return reasonCarried
	}
	return reasonDelegated
}
