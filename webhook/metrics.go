package webhook

import "time"

// Recorder records every decision the guard makes: its kind label (KindOther for kinds the guard
// does not judge), result, reason, whether it was a server-side dry run, and how long it took,
// lookups included. Package webhook/metrics records them as Prometheus series.
type Recorder interface {
	Decided(kind string, allowed bool, reason Reason, dryRun bool, took time.Duration)
}

// KindOther is the kind label of requests for kinds the guard does not judge.
const KindOther = "other"

// JudgedKinds are the kind label values besides KindOther.
func JudgedKinds() []string {
	var out []string
	for _, s := range PodSources {
		out = append(out, s.GVK.Kind)
	}
	out = append(out, gvkConfigMap.Kind, gvkService.Kind)
	for _, k := range RBACKinds {
		out = append(out, k.Kind)
	}
	return out
}

// observe records one decision on req; every decision is recorded through it, so none misses the
// dry_run label.
func (h *Handler) observe(req Request, kind string, allowed bool, reason Reason, took time.Duration) {
	if h.Metrics != nil {
		h.Metrics.Decided(kind, allowed, reason, req.DryRun != nil && *req.DryRun, took)
	}
}
