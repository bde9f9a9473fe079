package results

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/subnet"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func sid(t testing.TB) subnet.SnapshotID { return overlaytest.Tree(t).ID() }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
