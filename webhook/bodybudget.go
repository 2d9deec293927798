package webhook

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// bodyBudget is the memory one process lets request bodies (and what decoding them costs) hold:
// a reserve for the first smallBody bytes of every body and a pool for the rest.
type bodyBudget struct {
	small, large *semaphore.Weighted
}

func newBodyBudget(small, large int64) *bodyBudget {
	return &bodyBudget{small: semaphore.NewWeighted(small), large: semaphore.NewWeighted(large)}
}

// bodyCharge is what one request holds of the budget; release returns all of it.
type bodyCharge struct {
	b            *bodyBudget
	bytes        int64 // body bytes charged for so far
	small, large int64 // held of each, in budget units (decodeFactor per byte)
}

func (b *bodyBudget) charge() *bodyCharge { return &bodyCharge{b: b} }

// acquire charges n more body bytes, waiting for budget until ctx is done.
func (c *bodyCharge) acquire(ctx context.Context, n int) error {
	cost := int64(decodeFactor) * int64(n)
	fromSmall := min(cost, max(0, int64(decodeFactor)*smallBody-c.small))
	if fromSmall > 0 {
		if err := c.b.small.Acquire(ctx, fromSmall); err != nil {
			return err
		}
		c.small += fromSmall
	}
	if rest := cost - fromSmall; rest > 0 {
		if err := c.b.large.Acquire(ctx, rest); err != nil {
			return err
		}
		c.large += rest
	}
	c.bytes += int64(n)
	return nil
}

// refund gives back n body bytes charged but not read (the body ended early), large pool first.
func (c *bodyCharge) refund(n int) {
	if n <= 0 {
		return
	}
	cost := int64(decodeFactor) * int64(n)
	fromLarge := min(cost, c.large)
	if fromLarge > 0 {
		c.b.large.Release(fromLarge)
		c.large -= fromLarge
	}
	if rest := min(cost-fromLarge, c.small); rest > 0 {
		c.b.small.Release(rest)
		c.small -= rest
	}
	c.bytes -= int64(n)
}

// release returns everything the request holds.
func (c *bodyCharge) release() {
	if c.large > 0 {
		c.b.large.Release(c.large)
	}
	if c.small > 0 {
		c.b.small.Release(c.small)
	}
	c.small, c.large, c.bytes = 0, 0, 0
}
