package main

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"

	"github.com/noetl/ehdb-election/election"
)

// readyz serves /readyz, the writer's readiness probe: 200 "ok" while election.Readiness holds,
// 503 with the reason otherwise (the kubelet only reads the status; the text is for a person
// with curl or `kubectl get --raw`). Each change of reason is logged once, so the Pod's log says
// when and why it left, or joined, its Service's endpoints.
type readyz struct {
	check func() error
	log   *slog.Logger

	mu   sync.Mutex
	last string // the last answer's reason ("ok" when ready); "" before the first probe
}

func (h *readyz) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	err := h.check()
	reason := "ok"
	if err != nil {
		reason = "not ready"
		var nr *election.NotReady
		if errors.As(err, &nr) {
			reason = string(nr.Reason)
		}
	}
	h.mu.Lock()
	changed := reason != h.last
	h.last = reason
	h.mu.Unlock()
	if changed {
		if err != nil {
			h.log.Warn("not ready", "reason", reason, "detail", err.Error())
		} else {
			h.log.Info("ready")
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, err.Error()+"\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}
