package crawl

import "time"

// The hold: a check of the operator's limits beyond the crawler's own
// (the node's disk cap), asked before each fetch.

// holdPoll is how often a held dispatcher asks the check again.
var holdPoll = 5 * time.Second

// Hold sets a check the dispatcher asks before each fetch. While it
// returns an error the crawler fetches nothing and Promise takes nothing:
// queued requests stay queued and senders keep theirs, so nothing is
// lost; Stats.Held says why, and the log says when crawling pauses and
// resumes. check must be cheap (the node's disk cap measures at most
// every few seconds) and safe for concurrent use. Default: none.
func Hold(check func() error) Option {
	return func(c *config) error { c.hold = check; return nil }
}

// held asks the hold check, logs its changes and keeps its reason for
// Stats; nil when crawling may go on.
func (c *Crawler) held() error {
	if c.cfg.hold == nil {
		return nil
	}
	err := c.cfg.hold()
	var why string
	if err != nil {
		why = err.Error()
	}
	was := ""
	if old := c.holdWhy.Swap(&why); old != nil {
		was = *old
	}
	if (was == "") != (why == "") {
		if why != "" {
			c.log.Warn("crawling paused", "error", err)
		} else {
			c.log.Info("crawling resumed")
		}
	}
	return err
}
