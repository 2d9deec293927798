package webhook

import (
	"context"
	"errors"

	"golang.org/x/sync/semaphore"
)

// bodyBudget is the memory one process lets request bodies (and what decoding them costs) hold:
// a reserve for the first smallBody bytes of every body and a pool for the rest.
type bodyBudget struct {
	small, large *semaphore.Weighted
	largeSize    int64
}

func newBodyBudget(small, large int64) *bodyBudget {
	return &bodyBudget{small: semaphore.NewWeighted(small), large: semaphore.NewWeighted(large), largeSize: large}
}

// bodyCharge is what one request holds of the budget; release returns all of it.
type bodyCharge struct {
	b            *bodyBudget
	bytes        int64 // body bytes charged for so far
	small, large int64 // held of each, in budget units (decodeFactor per byte)
	// most is the most body bytes the request can have (its Content-Length, or maxReviewBytes+1);
	// reserved, the part of large taken for bytes still to come.
	most, reserved int64
}

// charge begins the charge of a request whose body has at most most bytes.
func (b *bodyBudget) charge(most int64) *bodyCharge { return &bodyCharge{b: b, most: most} }

// acquire charges n more body bytes, waiting for budget until ctx is done.
//
// The first body byte past the reserve takes from the pool, all at once, all that the rest of
// the body can need (by most), and the bytes after it draw on that. Taken chunk by chunk, the pool
// was shared by bodies that each held part of it and waited for more, none of them finishing:
// six concurrent Pods of 6.9 MB reviews each got HTTP 429 at their deadline, and the API server
// admitted every one unjudged (the Pods entry fails open; team G). Taken whole, a body waits for
// its turn (the pool serves waiters in order) and then has all it needs; the bytes it has not
// sent are charged only once it has sent a reserve's worth, at 32 KiB/s or faster, and until its
// deadline.
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
		if need := rest - c.reserved; need > 0 {
			take := min(max(need, int64(decodeFactor)*(c.most-c.bytes)-fromSmall-c.reserved), c.b.largeSize-c.large)
			if take < need {
				return errors.New("a body larger than the whole pool")
			}
			if err := c.b.large.Acquire(ctx, take); err != nil {
				return err
			}
			c.large += take
			c.reserved += take
		}
		c.reserved -= rest
	}
	c.bytes += int64(n)
	return nil
}

// refund gives back n body bytes charged but not read (the body ended early or paused): the
// large pool's share of them returns to the reservation (done releases it), the rest to the reserve.
func (c *bodyCharge) refund(n int) {
	if n <= 0 {
		return
	}
	cost := int64(decodeFactor) * int64(n)
	fromLarge := min(cost, c.large-c.reserved)
	c.reserved += fromLarge
	if rest := min(cost-fromLarge, c.small); rest > 0 {
		c.b.small.Release(rest)
		c.small -= rest
	}
	c.bytes -= int64(n)
}

// done gives back what is reserved for body bytes that will not come: the body is complete.
func (c *bodyCharge) done() {
	if c.reserved > 0 {
		c.b.large.Release(c.reserved)
		c.large -= c.reserved
		c.reserved = 0
	}
}

// release returns everything the request holds.
func (c *bodyCharge) release() {
	if c.large > 0 {
		c.b.large.Release(c.large)
	}
	if c.small > 0 {
		c.b.small.Release(c.small)
	}
	c.small, c.large, c.bytes, c.reserved = 0, 0, 0, 0
}
