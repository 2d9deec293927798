package status

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// watch keeps the view open until ctx ends. An informer lists the Leases once and then watches
// them (re-listing only when the API server says the watch is too old); the view redraws after
// Lease events — at most once per minRedraw, later events folded into one draw — and, with no
// event at all, at the instant the next live Lease expires, because expiry is the passing of
// time, not a change to the object. Nothing polls.
//
// A failure of the first list, and a denial at any time (the identity may lack "watch", or lose
// its binding), end the view with the one-shot view's message and exit code; other failures are
// warnings while the informer reconnects.
func (v *view) watch(ctx context.Context, clk clock.Clock, minRedraw, requestTimeout time.Duration) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The reflector logs its retries through klog; the view says them itself, once.
	ctx = klog.NewContext(ctx, logr.Discard())

	leases := v.cs.CoordinationV1().Leases(v.ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if requestTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, requestTimeout)
				defer cancel()
			}
			return leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return leases.Watch(ctx, o)
		},
	}
	// Against an API server the informer starts with a streaming watch-list; a client that cannot
	// serve one (client-go's fake) gets list-then-watch.
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, v.cs), &coordinationv1.Lease{},
		cache.SharedIndexInformerOptions{ObjectDescription: "leases"})

	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default: // a draw is already due; it will show this change too
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	if err != nil {
		fmt.Fprintf(v.stderr, "error: watching leases: %v\n", err)
		return ExitError
	}
	failures := make(chan error, 1)
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		select {
		case failures <- err:
		default: // one pending report is enough; the informer keeps retrying
		}
	}); err != nil {
		fmt.Fprintf(v.stderr, "error: watching leases: %v\n", err)
		return ExitError
	}
	go inf.RunWithContext(ctx)

	select {
	case <-ctx.Done():
		return ExitOK
	case err := <-failures:
		msg, code := v.describeListError(err, true)
		fmt.Fprintln(v.stderr, msg)
		return code
	case <-reg.HasSyncedChecker().Done():
	}
	drain(changed)

	for {
		code, next := v.drawStore(ctx, inf.GetStore())
		if code != ExitOK {
			return code
		}
		last := clk.Now()
		var expiry clock.Timer
		var expired <-chan time.Time
		if next > 0 {
			expiry = clk.NewTimer(next)
			expired = expiry.C()
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return ExitOK
			case err := <-failures:
				if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
					// Retrying a denial would re-list on a backoff: polling, and a stale view.
					msg, code := v.describeListError(err, true)
					fmt.Fprintln(v.stderr, msg)
					return code
				}
				fmt.Fprintf(v.stderr, "warning: watching leases: %s (reconnecting; the view may be stale until then)\n", apiMessage(err))
				continue
			case <-changed:
				if gap := minRedraw - clk.Since(last); gap > 0 {
					select {
					case <-ctx.Done():
						return ExitOK
					case <-clk.After(gap):
					}
				}
				drain(changed)
			case <-expired:
			}
			break wait
		}
		if expiry != nil {
			expiry.Stop()
		}
	}
}

// drawStore draws the informer's Leases and returns the time until the next live Lease expires
// (0: none is live), when the view must be redrawn even without an event.
func (v *view) drawStore(ctx context.Context, store cache.Store) (int, time.Duration) {
	objs := store.List()
	leases := make([]coordinationv1.Lease, 0, len(objs))
	for _, o := range objs {
		if l, ok := o.(*coordinationv1.Lease); ok {
			leases = append(leases, *l)
		}
	}
	r := v.report(leases)
	return v.draw(ctx, r), nextExpiry(r.Rows)
}

// nextExpiry is how long until the first live row turns expired: one nanosecond after its
// renewTime + duration, the boundary instant itself being live. 0 when no row is live.
func nextExpiry(rows []Row) time.Duration {
	var next time.Duration
	for _, r := range rows {
		if r.State != Live || r.ExpiresIn == nil {
			continue
		}
		if d := *r.ExpiresIn + time.Nanosecond; next == 0 || d < next {
			next = d
		}
	}
	return next
}

func drain(c <-chan struct{}) {
	select {
	case <-c:
	default:
	}
}
