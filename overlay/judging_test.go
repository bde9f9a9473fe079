package overlay

import (
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
)

func TestRouteNotice(t *testing.T) {
	self, other := peer.ID("self"), peer.ID("other")
	tests := []struct {
		name      string
		n         withheldNotice
		toSelf    bool
		wantError error
	}{
		{"about another node", withheldNotice{holder: other}, false, nil},
		{"about this node", withheldNotice{holder: self}, false, ErrRecused},
		{"a confirmation about this node", withheldNotice{holder: self, confirmed: true}, true, nil},
		{"a confirmation about another node", withheldNotice{holder: other, confirmed: true}, false, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toSelf, err := routeNotice(tt.n, self)
			if toSelf != tt.toSelf || !errors.Is(err, tt.wantError) || (err == nil) != (tt.wantError == nil) {
				t.Errorf("routeNotice = %v, %v; want %v, %v", toSelf, err, tt.toSelf, tt.wantError)
			}
		})
	}
}

func TestJudgeNotice(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	const grace = 10 * time.Minute
	old := now.Add(-3 * grace) // a request the holder has had long enough
	answer := func(r pb.WithheldVerdict_Result, retry time.Duration) noticeDecision {
		d := noticeDecision{step: noticeAnswer, result: r}
		if retry > 0 {
			d.retryMs = retry.Milliseconds() + 1
		}
		return d
	}
	tests := []struct {
		name string
		n    withheldNotice
		f    noticeFacts
		want noticeDecision
	}{
		{"not the holder's subnet", withheldNotice{asked: old}, noticeFacts{}, answer(pb.WithheldVerdict_NOT_HOLDER, 0)},
		{"refused, not yet sent to the holder", withheldNotice{refused: true}, noticeFacts{held: true},
			noticeDecision{step: noticeAskHolder}},
		{"refused again, not noted", withheldNotice{refused: true}, noticeFacts{held: true, refusedAgain: true},
			noticeDecision{step: noticeNote}},
		{"refused again, noted within the grace", withheldNotice{refused: true},
			noticeFacts{held: true, refusedAgain: true, first: now.Add(-grace / 4)}, answer(pb.WithheldVerdict_NOTED, grace*3/4)},
		{"refused again, noted a grace ago", withheldNotice{refused: true},
			noticeFacts{held: true, refusedAgain: true, first: now.Add(-grace)}, noticeDecision{step: noticeRefetch}},
		{"a receipt younger than the grace", withheldNotice{asked: now.Add(-grace / 2)}, noticeFacts{held: true},
			answer(pb.WithheldVerdict_NOTED, grace/2)},
		{"a receipt a grace old, not noted", withheldNotice{asked: now.Add(-grace)}, noticeFacts{held: true},
			noticeDecision{step: noticeNote}},
		{"noted just now", withheldNotice{asked: old}, noticeFacts{held: true, first: now},
			answer(pb.WithheldVerdict_NOTED, grace)},
		{"noted a grace ago", withheldNotice{asked: old}, noticeFacts{held: true, first: now.Add(-grace)},
			noticeDecision{step: noticeRefetch}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			f.now, f.grace = now, grace
			if got := judgeNotice(tt.n, f); got != tt.want {
				t.Errorf("judgeNotice = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestJudgeAudit(t *testing.T) {
	tests := []struct {
		name      string
		f         auditFacts
		want      auditDecision
		wantError error
	}{
		{"convicted", auditFacts{convicted: true, priors: maxAuditPriors + 1},
			auditDecision{result: pb.AuditVerdict_INCONCLUSIVE}, nil},
		{"not delegated", auditFacts{priors: maxAuditPriors + 1}, auditDecision{result: pb.AuditVerdict_NOT_DELEGATED}, nil},
		{"too many priors", auditFacts{delegated: true, judged: true, priors: maxAuditPriors + 1}, auditDecision{}, ErrTooLarge},
		{"judged before", auditFacts{delegated: true, judged: true, priors: maxAuditPriors},
			auditDecision{result: pb.AuditVerdict_INCONCLUSIVE, priors: true}, nil},
		{"refetched", auditFacts{delegated: true}, auditDecision{refetch: true, priors: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := judgeAudit(tt.f)
			if got != tt.want || !errors.Is(err, tt.wantError) || (err == nil) != (tt.wantError == nil) {
				t.Errorf("judgeAudit = %+v, %v; want %+v, %v", got, err, tt.want, tt.wantError)
			}
		})
	}
}

func TestAdmitPrior(t *testing.T) {
	author := peer.ID("author")
	const u = "http://a.test/page"
	good := Claim{Node: author, URL: u, Status: 200, Fingerprint: 7}
	with := func(f func(*Claim)) Claim { c := good; f(&c); return c }
	tests := []struct {
		name string
		pc   Claim
		err  error
		u    string
		ok   bool
	}{
		{"admitted", good, nil, u, true},
		{"bad evidence", good, ErrBadEvidence, u, false},
		{"another author", with(func(c *Claim) { c.Node = "other" }), nil, u, false},
		{"another URL", good, nil, "http://a.test/other", false},
		{"no host", with(func(c *Claim) { c.URL = "page" }), nil, "page", false},
		{"no fingerprint", with(func(c *Claim) { c.Fingerprint = 0 }), nil, u, false},
		{"not a 2xx page", with(func(c *Claim) { c.Status = 404 }), nil, u, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, ok := admitPrior(tt.pc, tt.err, author, tt.u)
			if ok != tt.ok || (ok && host != "a.test") || (!ok && host != "") {
				t.Errorf("admitPrior = %q, %v; want ok %v", host, ok, tt.ok)
			}
		})
	}
}

func TestResultNames(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{AuditAgree.String(), "agree"},
		{AuditNotDelegated.String(), "not-delegated"},
		{AuditResult(0).String(), "audit-result(0)"},
		{AuditResult(99).String(), "audit-result(99)"},
		{WithheldTakenBack.String(), "taken-back"},
		{WithheldNotHolder.String(), "not-holder"},
		{WithheldTaken.String(), "taken"},
		{WithheldResult(0).String(), "withheld-result(0)"},
		{WithheldResult(1<<32 + 1).String(), "withheld-result(4294967297)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
