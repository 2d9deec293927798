package webhook

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// This file answers: can a Service change what a writer's election reads from its environment?
// The kubelet gives every container that keeps its service links (enableServiceLinks, on by
// default) variables named after each Service of its namespace with a cluster IP — NAME_SERVICE_HOST,
// NAME_SERVICE_PORT, NAME_PORT and more, NAME the Service's name upper-cased with '-' as '_'
// (pkg/kubelet/envvars FromServices) — in one map with the default namespace's kubernetes
// Service, in no fixed order (getServiceEnvVarMap), and a container's own env replaces them. So
// a Service whose variable names land on one the election or client-go reads sets it in every
// writer there that does not set it itself: kubernetes sets KUBERNETES_SERVICE_HOST and _PORT
// (the second red team), kubernetes-service sets KUBERNETES_SERVICE_PORT to "tcp://ip:port" in
// about three starts of four, and client-go then builds no configuration and the election
// declines under an armed fence (the twelfth red team). The rule is by name, whatever the type:
// an ExternalName Service has no variables, but may become a ClusterIP one by an update.

var gvkService = schema.GroupVersionKind{Version: "v1", Kind: "Service"}

// linkedVariables are the variables a writer's election reads from its environment whose value
// a service link could supply: client-go's API server address and the election's own settings.
func linkedVariables() []string {
	return append(slices.Clone(apiServerVars), electionenv.EnvElection, electionenv.EnvLeaseSecs, electionenv.EnvRenewSecs,
		electionenv.EnvShard, electionenv.EnvNamespace, EnvFencing, electionenv.EnvPodNamespace, electionenv.EnvHostname)
}

// linkSuffix matches what FromServices appends to a Service's variable name: _SERVICE_HOST,
// _SERVICE_PORT (with _<PORT NAME> for a named port), _PORT, and _PORT_<number>_<PROTOCOL> (with
// _PROTO, _PORT or _ADDR). Port names are IANA service names (letters, digits, '-').
var linkSuffix = regexp.MustCompile(`^_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT|PORT_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)$`)

// LinkedServiceNames are the Service names whose service-link variables can land on a variable
// the election reads (linkedVariables), for some ports: kubernetes and kubernetes-service. The
// chart's services entry sends exactly these (its matchCondition, checked against this list).
func LinkedServiceNames() []string {
	var out []string
	for _, v := range linkedVariables() {
		for i := range len(v) {
			if v[i] != '_' || i == 0 || !linkSuffix.MatchString(v[i:]) {
				continue
			}
			name := strings.ToLower(strings.ReplaceAll(v[:i], "_", "-"))
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// linkVariableNames are the names of the variables the kubelet derives from svc, as if it had a
// cluster IP (FromServices' names, in its order).
func linkVariableNames(svc *corev1.Service) []string {
	prefix := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
	out := []string{prefix + "_SERVICE_HOST", prefix + "_SERVICE_PORT"}
	ports := svc.Spec.Ports
	for _, p := range ports {
		if p.Name != "" {
			out = append(out, prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")))
		}
	}
	for i, p := range ports {
		if i == 0 {
			out = append(out, prefix+"_PORT")
		}
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		base := prefix + "_PORT_" + strconv.Itoa(int(p.Port)) + "_" + strings.ToUpper(proto)
		out = append(out, base, base+"_PROTO", base+"_PORT", base+"_ADDR")
	}
	return out
}

// serviceSets lists the variables the election reads that svc's service links set (with its
// ports; with no ports, those its name alone sets, as a later update may add the ports).
func serviceSets(svc *corev1.Service) []string {
	if len(svc.Spec.Ports) == 0 {
		svc = svc.DeepCopy()
		svc.Spec.Ports = []corev1.ServicePort{{Port: 1}}
	}
	reads := linkedVariables()
	var out []string
	for _, n := range linkVariableNames(svc) {
		if slices.Contains(reads, n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func (h *Handler) handleService(req Request, log logr.Logger, start time.Time) Response {
	svc := &corev1.Service{}
	if err := decodeInto(req.Object.Raw, svc, gvkService); err != nil {
		h.observe(req, gvkService.Kind, false, ReasonMalformed, time.Since(start))
		return errored(http.StatusBadRequest, fmt.Errorf("ehdb-election guard: malformed Service: %w", err))
	}
	if req.Name != "" {
		svc.Name = req.Name
	}
	sets := serviceSets(svc)
	if len(sets) == 0 {
		h.observe(req, gvkService.Kind, true, ReasonNoOpinion, time.Since(start))
		return allowed()
	}
	msg := fmt.Sprintf("ehdb-election guard: refusing Service %s/%s: the kubelet gives every container in %s that keeps its service links variables named after it, and %s among them is what a writer's election reads (client-go dials KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT), in place of what the kubelet sets for the cluster's API server. Name it otherwise (a Service named kubernetes belongs in the default namespace only).", req.Namespace, svc.Name, req.Namespace, strings.Join(sets, " and "))
	h.observe(req, gvkService.Kind, false, ReasonOtherAPIServer, time.Since(start))
	log.Info("decision", "allowed", false, "reason", ReasonOtherAPIServer, "sets", sets)
	return denied(msg)
}
