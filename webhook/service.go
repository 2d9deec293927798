package webhook

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// This file answers: can a Service redirect the election? The kubelet gives every container the
// address of the API server as KUBERNETES_SERVICE_HOST and _PORT from the Service kubernetes in
// the default namespace, unless the pod's own namespace has a Service of that name and the pod
// keeps its service links (enableServiceLinks, on by default): then that Service's address wins
// (pkg/kubelet getServiceEnvVarMap). client-go's in-cluster configuration dials it, so one such
// Service in a guarded namespace sends every writer's election to whatever it selects (the second
// red team). A Service named kubernetes outside the default namespace has no other use: in a
// guarded namespace its create, or an update of one, is refused.

var gvkService = schema.GroupVersionKind{Version: "v1", Kind: "Service"}

// apiServiceName is the Service whose address the kubelet gives as the API server's.
const apiServiceName = "kubernetes"

func (h *Handler) handleService(req Request, log logr.Logger, start time.Time) Response {
	name := req.Name
	if name != apiServiceName {
		h.observe(req, gvkService.Kind, true, ReasonNoOpinion, time.Since(start))
		return allowed()
	}
	msg := fmt.Sprintf("ehdb-election guard: refusing Service %s/%s: the kubelet gives its address to every container in %s that keeps its service links as KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, in place of the cluster's API server, so every writer's election there would dial it. Name it otherwise (a Service named %s belongs in the default namespace only).", req.Namespace, name, req.Namespace, apiServiceName)
	h.observe(req, gvkService.Kind, false, ReasonOtherAPIServer, time.Since(start))
	log.Info("decision", "allowed", false, "reason", ReasonOtherAPIServer)
	return denied(msg)
}
