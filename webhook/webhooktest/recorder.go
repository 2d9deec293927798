package webhooktest

import (
	"strconv"
	"sync"
	"time"

	"github.com/noetl/ehdb-election/webhook"
)

// Recorder is a webhook.Recorder that counts decisions by the labels the guard's metrics give
// them: kind, result (allowed/denied), reason and dry_run.
type Recorder struct {
	mu     sync.Mutex
	counts map[[4]string]int
}

var _ webhook.Recorder = (*Recorder)(nil)

// Decided implements webhook.Recorder.
func (r *Recorder) Decided(kind string, allowed bool, reason webhook.Reason, dryRun bool, _ time.Duration) {
	result := "denied"
	if allowed {
		result = "allowed"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[[4]string]int{}
	}
	r.counts[[4]string{kind, result, string(reason), strconv.FormatBool(dryRun)}]++
}

// Count is the decisions recorded with every label given (kind, result, reason, dry_run).
func (r *Recorder) Count(labels map[string]string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.counts {
		got := map[string]string{"kind": k[0], "result": k[1], "reason": k[2], "dry_run": k[3]}
		match := true
		for name, v := range labels {
			match = match && got[name] == v
		}
		if match {
			n += c
		}
	}
	return n
}
