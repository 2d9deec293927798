package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// fuzzInputBudget is each fuzz input's time budget: the deadline its review's lookups get, as the
// API server's webhook timeout bounds a real review's. The guard's own work budget (Budget,
// MaxShards) keeps any one input far below it.
const fuzzInputBudget = 100 * time.Millisecond

// fuzzWorkBudget is the handlers' work budget (Handler.WorkBudget): every property below holds
// for any budget (a spent budget makes values unknowable, which refuses).
const fuzzWorkBudget = 64 << 10

// FuzzAdmissionReview serves reviews (fuzzBody: raw bodies, or reviews built by a program: a
// workload of every judged kind, ephemeral containers, a StatefulSet's scale, ConfigMap creates,
// updates and deletes, RBAC and ServiceAccount changes) to the HTTP handler of two clusters:
//   - an empty one (no ServiceAccount, no binding, no Lease; one unarmed workload reads its
//     fencing value from ConfigMap flags): a review must never panic or fail internally (a
//     recovered panic is a 500); no workload, Pod or ephemeral container whose last
//     NOETL_EHDB_FENCING entry is the literal enforce is admitted; no ConfigMap change that arms
//     the reader is admitted;
//   - a bound one, where one armed writer runs with its election on (from ConfigMap flags), its
//     live Lease, and the chart's ServiceAccount, Role and RoleBinding: no change to that RBAC,
//     that ServiceAccount or that ConfigMap that disarms it (takes its lease access or its token
//     away, turns its election off or moves it off its live shard) is admitted.
//
// The work per input stays that of one or two small reviews, and the inputs small (fuzzMaxProgram),
// so the engine's minimization of each new input takes well under a second and it keeps fuzzing.
func FuzzAdmissionReview(f *testing.F) {
	for _, seed := range fuzzReviewSeeds {
		f.Add(seed.program)
	}
	h, bound := fuzzHandler(f), fuzzBoundHandler(f)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzReviewInput(t, h, bound, data) })
}

// fuzzReviewInput is FuzzAdmissionReview's work on one input (BenchmarkFuzzAdmissionReviewInput
// measures it).
func fuzzReviewInput(t testing.TB, empty, bound http.Handler, data []byte) {
	if len(data) > fuzzMaxRaw || (len(data) > fuzzMaxProgram && data[0] != '{') {
		return
	}
	body := fuzzBody(data)
	if allowed, _ := fuzzServe(t, empty, body); allowed && mayMentionEnforce(body) {
		if literallyArmed(body) {
			t.Fatalf("armed object allowed in an empty cluster: %s", body)
		}
		if configMapArmsReader(body) {
			t.Fatalf("a ConfigMap change that arms its reader allowed in an empty cluster: %s", body)
		}
	}
	// The bound cluster judges only changes of what its writer runs with; other bodies are not
	// sent twice, so the work per input stays that of one review.
	if !bytes.Contains(body, []byte("rbac.authorization.k8s.io")) && !bytes.Contains(body, []byte("ServiceAccount")) && !bytes.Contains(body, []byte("ConfigMap")) &&
		!bytes.Contains(body, []byte("Scale")) && !bytes.Contains(body, []byte("Binding")) {
		return
	}
	allowed, message := fuzzServe(t, bound, body)
	if !allowed && strings.Contains(message, "refusing to disarm") && isClusterRoleReview(body) {
		t.Fatalf("a ClusterRole change refused as disarming, though no ClusterRole of the bound cluster grants its writer anything: %s\n%s", body, message)
	}
	if allowed {
		if bindingDisarmsThePod(body) {
			t.Fatalf("a Binding whose label turns the bound Pod's election off allowed: %s", body)
		}
		if scaleStartsADeadShard(body) {
			t.Fatalf("a scale-up from 0 of an armed workload whose shard has no Lease allowed: %s", body)
		}
		if disarmsTheBoundWriter(body) {
			t.Fatalf("a change that disarms the bound writer allowed: %s", body)
		}
		if configMapDisarmsBoundWriter(body) {
			t.Fatalf("a ConfigMap change that disarms the bound writer allowed: %s", body)
		}
		if grantsTheBoundWriterEveryLeaseVerb(body) {
			t.Fatalf("an RBAC change that grants the bound writer every verb on its Lease, which the lease guard then refuses it, allowed: %s", body)
		}
	}
}

// fuzzReviewSeeds are programs (fuzzprogram_test.go) of the reviews that matter, each with what
// it stands for, and a few raw bodies.
var fuzzReviewSeeds = []struct {
	name    string
	program []byte
}{
	// subject, namespace, naming, dry run, edits | workload: kind, operation, owner, replicas,
	// old, account, tweak, container | env: 0 name value (literal) ...
	{"an armed StatefulSet without its election", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	{"a compliant StatefulSet", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"a compliant StatefulSet, armed by an update", []byte{0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an unarmed StatefulSet", []byte{0, 0, 0, 0, 0, 1}},
	{"a compliant StatefulSet of 2^31-1 replicas", []byte{0, 0, 0, 0, 0, 1, 0, 0, 3, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed Pod", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed Pod of the StatefulSet", []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed Deployment", []byte{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed DaemonSet", []byte{0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed ReplicaSet of a Deployment", []byte{0, 0, 0, 0, 0, 4, 0, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed Job of a CronJob", []byte{0, 0, 0, 0, 0, 5, 0, 3, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed CronJob", []byte{0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed ReplicationController", []byte{0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	{"an armed init container", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 2, 0, 0, 0, 0, 1, 5}},
	{"fencing en$(MODE), MODE from an optional ConfigMap key", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 1, 2, 0, 2, 1, 0, 0, 10, 0, 1, 5}},
	{"an armed StatefulSet on the host network", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 1, 5}},
	{"a deleted StatefulSet", []byte{0, 0, 0, 0, 0, 1, 2, 0, 0, 1}},
	{"an armed StatefulSet, cut short", []byte{0, 0, 0, 0, 7, 0, 200, 0, 0, 150, 0, 0, 180, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 5}},
	// ephemeral: old pod (unarmed, compliant, armed), operation (7: CREATE) | env
	{"an armed ephemeral container", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	{"an armed ephemeral container in a compliant Pod", []byte{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 5}},
	{"an unarmed ephemeral container", []byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 5}},
	// ConfigMap: operation, name, old (0: the cluster's) [keys], new keys: count, key value ...
	{"a ConfigMap created that arms its reader", []byte{2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}},
	{"a ConfigMap edited to arm its reader", []byte{2, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1}},
	{"a ConfigMap edited to disarm its reader", []byte{2, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0, 2}},
	{"the bound writer's election turned off", []byte{2, 0, 0, 0, 0, 1, 0, 0, 1, 2, 12}},
	{"the bound writer's shard made unparsable", []byte{2, 0, 0, 0, 0, 1, 0, 0, 2, 2, 5, 3, 3}},
	{"the bound writer's ConfigMap deleted", []byte{2, 0, 0, 0, 0, 2, 0}},
	// RBAC: operation (update, delete, create), name (chart Role, writer SA, other), kind (RB,
	// Role, CRB, CR, SA) | binding: role, subjects | rules: 0 the chart's, 1 custom ...
	{"the chart's RoleBinding deleted", []byte{3, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}},
	{"the writer unbound", []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}},
	{"a subject added", []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1}},
	{"the chart's Role deleted", []byte{3, 0, 0, 0, 0, 1, 0, 1, 0, 0}},
	{"the chart's Role without update", []byte{3, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 3, 0}},
	{"the writer's ServiceAccount deleted", []byte{3, 0, 0, 0, 0, 1, 1, 4, 0, 0}},
	{"the writer's ServiceAccount stops mounting its token", []byte{3, 0, 0, 0, 0, 0, 1, 4, 0, 1}},
	{"a ClusterRoleBinding edited", []byte{3, 0, 0, 0, 0, 0, 0, 2, 1, 0, 1, 0, 0, 2}},
	{"a ClusterRole edited", []byte{3, 0, 0, 0, 0, 0, 0, 3, 0, 1, 1, 1, 1, 1, 0}},
	{"a RoleBinding of every verb on leases created for the writer", []byte{3, 0, 0, 0, 0, 2, 2, 0, 0, 0, 3, 0}},
	{"a ClusterRoleBinding of every verb on leases created for the writer", []byte{3, 0, 0, 0, 0, 2, 2, 2, 0, 0, 3, 0}},
	{"the writer added to a binding of every verb on leases", []byte{3, 0, 0, 0, 0, 0, 2, 0, 3, 1, 1, 3, 2, 1, 0}},
	{"the chart's Role widened to every verb on leases", []byte{3, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 1, 0}},
	{"the chart's Role given the probe verb on the writer's Lease", []byte{3, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 6, 1}},
	// scale: new replicas, old (0, 1, 3, 2^31-1)
	{"a StatefulSet scaled from 1 to 3", []byte{4, 0, 0, 0, 0, 2, 1}},
	{"a Deployment scaled from 0 to 1", []byte{4, 0, 0, 0, 0, 1, 0, 1}},
	{"a ReplicationController scaled from 0 to 3", []byte{4, 0, 0, 0, 0, 2, 0, 3}},
	// Raw bodies.
	{"a raw armed Pod", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","object":{"spec":{"containers":[{"name":"w","env":[{"name":"NOETL_EHDB_FENCING","value":"enforce"}]}]}}}}`)},
	{"a raw empty request", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`)},
	{"a raw empty object", []byte(`{}`)},
}

// fuzzServe posts body to h and reports whether it was allowed; a 5xx or a 200 without a review
// fails the test.
func fuzzServe(t testing.TB, h http.Handler, body []byte) (allowed bool, message string) {
	rec := httptest.NewRecorder()
	// The per-input budget: the API server's own ?timeout= (the handler works to 90% of it).
	req := httptest.NewRequest(http.MethodPost, "/validate?timeout="+fuzzInputBudget.String(), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
	}
	if rec.Code != 200 {
		return false, ""
	}
	// Only what the test reads: decoding the whole AdmissionReview again would double the work.
	var out struct {
		Response *struct {
			Allowed bool `json:"allowed"`
			Result  *struct {
				Code    int32  `json:"code"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("200 without a review: %q", rec.Body.String())
	}
	if out.Response.Result != nil && out.Response.Result.Code >= 500 {
		t.Fatalf("internal error: %s", out.Response.Result.Message)
	}
	if out.Response.Result != nil {
		message = out.Response.Result.Message
	}
	return out.Response.Allowed, message
}

// fuzzHandler is the empty cluster's handler: nothing exists, one unarmed reader of ConfigMap
// flags. Built once per fuzzing process; its resolver keeps no record of the lookups.
func fuzzHandler(t testing.TB) http.Handler {
	return webhook.NewHTTPHandler(&webhook.Handler{Resolver: &wt.Resolver{Unrecorded: true}, Policy: webhook.Policy{RequireLiveLease: true, MaxShards: 4},
		LookupTimeout: fuzzInputBudget, WorkBudget: fuzzWorkBudget, Log: logr.Discard(), Readers: fuzzReaders(t), Owners: fakeOwners{}})
}

// fuzzReaders is the empty cluster's reader index: the reference writer, reading its fencing
// value from key "fencing" of ConfigMap "flags".
func fuzzReaders(t testing.TB) webhook.ConfigMapReaders {
	reader := sts(envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{webhook.ConfigMapIndex: webhook.IndexByConfigMap})
	if err := idx.Add(reader); err != nil {
		t.Fatal(err)
	}
	return webhook.IndexReaders{idx}
}

// fuzzBoundConfigMap is what the bound writer reads its election settings from.
var fuzzBoundConfigMap = map[string]string{electionenv.EnvElection: "true"}

// fuzzBoundWriter is the bound cluster's armed writer: the reference writer with the literal
// enforce and the chart's ServiceAccount, taking every other variable from ConfigMap flags
// (envFrom, optional: without it the writer starts, armed, with its election off).
func fuzzBoundWriter() *appsv1.StatefulSet {
	return sts(wt.Armed(), wt.ServiceAccount(wt.WriterSA), envFrom(corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "flags"}, Optional: ptr.To(true)}}))
}

// fuzzBoundHandler is the bound cluster's handler: the bound writer runs as the chart's
// ServiceAccount, bound by the chart's Role and RoleBinding only, its election on from ConfigMap
// flags, shard 0's Lease live, and the chart's lease guard in its namespace, which admits it by
// its grant of VerbElect and would refuse it once it held every verb on leases (fzWildRole, which
// nothing binds, grants that).
func fuzzBoundHandler(t testing.TB) http.Handler {
	c := &wt.Resolver{Unrecorded: true, ServiceAccounts: map[string]map[string]string{wt.WriterSA: nil},
		ConfigMaps: map[string]map[string]string{"flags": fuzzBoundConfigMap},
		Leases:     map[types.NamespacedName]coordinationv1.LeaseSpec{lease(ns, 0): wt.LiveLease(ns, 0, now.Add(-5*time.Second), 1).Spec}}
	c.Grant(ns, wt.WriterSA, ns, "get", "list", "watch", "create", "update", webhook.VerbElect)
	c.Roles = []rbacv1.Role{*mkRole(chartRole, fzChartLeaseRule)}
	c.RoleBindings = []rbacv1.RoleBinding{*roleBinding(chartRole, "Role", chartRole, saSubject(wt.WriterSA))}
	c.ClusterRoles = append(fuzzAggregated(), *clusterRole(fzWildRole, nil, nil, fzWildRule))
	c.LeaseGuards = map[string]webhook.LeaseGuardFact{ns: {Name: "fz-lease-guard", Verb: webhook.VerbElect}}
	users := fakeReaders(t, fuzzBoundWriter())
	return webhook.NewHTTPHandler(&webhook.Handler{Resolver: c, Policy: webhook.Policy{RequireLiveLease: true, MaxShards: 4}, Clock: clocktesting.NewFakePassiveClock(now),
		LookupTimeout: fuzzInputBudget, WorkBudget: fuzzWorkBudget, Log: logr.Discard(), Accounts: users, Readers: users, Workloads: newScaleTargets(t)})
}

// The oracles below are independent of the guard's code: they decode the body as the API server
// does (case-sensitively, like controller-runtime's review decoder) and judge it by the rules
// the promise states, with the kubelet model (fuzz_test.go) and the writer's own config parser.

// mayMentionEnforce is false only when no JSON string in body can decode to a text equal, in
// any case, to "enforce": it has neither those letters in a row (ASCII case-insensitively; none
// of them has another Unicode case folding) nor a \u escape. Both empty-cluster oracles need such
// a value, so a body without one skips their decoding.
func mayMentionEnforce(body []byte) bool {
	return bytes.Contains(body, []byte(`\u`)) || bytes.Contains(bytes.ToLower(body), []byte("enforce"))
}

// decodeRequest is the request of a review body, or nil.
func decodeRequest(body []byte) *admissionv1.AdmissionRequest {
	var rv admissionv1.AdmissionReview
	if kjson.UnmarshalCaseSensitivePreserveInts(body, &rv) != nil {
		return nil
	}
	return rv.Request
}

// scaleStartsADeadShard: an UPDATE of the scale subresource of a kind with a replica count, from 0
// (a Scale's replicas field is absent at 0) to more. In the bound cluster every such target is an
// armed writer on shard 1, which has no Lease, or is not found: refused either way.
func scaleStartsADeadShard(body []byte) bool {
	r := decodeRequest(body)
	if r == nil || r.SubResource != "scale" || r.Operation != admissionv1.Update || !slices.Contains(fzScaled, r.Resource) {
		return false
	}
	var now, old autoscalingv1.Scale
	if kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &now) != nil || kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) != nil {
		return false
	}
	return old.Spec.Replicas == 0 && now.Spec.Replicas > 0
}

// bindingDisarmsThePod: a binding of the bound cluster's Pod whose label e, which the Pod's
// election reads, does not enable the election by the writer's own parser.
func bindingDisarmsThePod(body []byte) bool {
	r := decodeRequest(body)
	if r == nil || r.SubResource != "binding" || r.Resource.Resource != "pods" || r.Resource.Group != "" || r.Operation != admissionv1.Create || r.Namespace != ns || r.Name != wt.WriterName {
		return false
	}
	var b corev1.Binding
	if kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &b) != nil {
		return false
	}
	v, ok := b.Labels["e"]
	if !ok {
		return false
	}
	cfg, _ := electionenv.Parse(func(k string) (string, bool) {
		if k == electionenv.EnvElection {
			return v, true
		}
		return "", false
	})
	return !cfg.Enabled
}

// literallyArmed: a CREATE of a judged kind, an UPDATE of a kind with a pod template, or an
// UPDATE of a Pod's ephemeral containers, not being deleted, after which a container (an
// ephemeral container the Pod did not have before) has a last NOETL_EHDB_FENCING env entry that
// is a literal enforce without references.
func literallyArmed(body []byte) bool {
	r := decodeRequest(body)
	if r == nil {
		return false
	}
	k := r.Kind
	ephemeral := r.SubResource == "ephemeralcontainers" && k == (metav1.GroupVersionKind{Version: "v1", Kind: "Pod"})
	switch {
	case ephemeral && r.Operation == admissionv1.Update:
	case r.SubResource != "":
		return false
	case r.Operation == admissionv1.Create:
	case r.Operation == admissionv1.Update && k.Kind != "Pod":
	default:
		return false
	}
	spec, meta := podSpecOf(k, r.Object.Raw)
	if spec == nil || meta.DeletionTimestamp != nil {
		return false
	}
	if ephemeral {
		had := map[string]bool{}
		if old, _ := podSpecOf(k, r.OldObject.Raw); old != nil {
			for _, c := range old.EphemeralContainers {
				had[c.Name] = true
			}
		}
		for _, c := range spec.EphemeralContainers {
			if !had[c.Name] && literalEnforce(c.Env) {
				return true
			}
		}
		return false
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if literalEnforce(c.Env) {
				return true
			}
		}
	}
	return false
}

// literalEnforce: the last NOETL_EHDB_FENCING entry of env is a literal enforce.
func literalEnforce(env []corev1.EnvVar) bool {
	last := -1
	for i, e := range env {
		if e.Name == "NOETL_EHDB_FENCING" {
			last = i
		}
	}
	if last < 0 {
		return false
	}
	e := env[last]
	return e.ValueFrom == nil && !strings.Contains(e.Value, "$") && strings.EqualFold(strings.TrimSpace(e.Value), "enforce")
}

// podSpecOf decodes raw as an object of kind and returns its pod spec and metadata (nil when it
// does not decode or is not a kind that runs pods).
func podSpecOf(k metav1.GroupVersionKind, raw []byte) (*corev1.PodSpec, *metav1.ObjectMeta) {
	dec := func(v any) bool { return len(raw) > 0 && kjson.UnmarshalCaseSensitivePreserveInts(raw, v) == nil }
	switch {
	case k == metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}:
		var o corev1.Pod
		if dec(&o) {
			return &o.Spec, &o.ObjectMeta
		}
	case k == metav1.GroupVersionKind{Version: "v1", Kind: "ReplicationController"}:
		var o corev1.ReplicationController
		if dec(&o) {
			if o.Spec.Template == nil {
				return &corev1.PodSpec{}, &o.ObjectMeta
			}
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "apps" && k.Version == "v1" && k.Kind == "StatefulSet":
		var o appsv1.StatefulSet
		if dec(&o) {
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "apps" && k.Version == "v1" && k.Kind == "Deployment":
		var o appsv1.Deployment
		if dec(&o) {
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "apps" && k.Version == "v1" && k.Kind == "DaemonSet":
		var o appsv1.DaemonSet
		if dec(&o) {
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "apps" && k.Version == "v1" && k.Kind == "ReplicaSet":
		var o appsv1.ReplicaSet
		if dec(&o) {
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "batch" && k.Version == "v1" && k.Kind == "Job":
		var o batchv1.Job
		if dec(&o) {
			return &o.Spec.Template.Spec, &o.ObjectMeta
		}
	case k.Group == "batch" && k.Version == "v1" && k.Kind == "CronJob":
		var o batchv1.CronJob
		if dec(&o) {
			return &o.Spec.JobTemplate.Spec.Template.Spec, &o.ObjectMeta
		}
	}
	return nil, nil
}

// configMapOf is the review's ConfigMap change in namespace noetl: its name (the request's, else
// the objects'), and each side's data with whether it exists and decodes.
func configMapOf(r *admissionv1.AdmissionRequest) (name string, now, old map[string]string, nowOK, oldOK bool) {
	if r == nil || r.SubResource != "" || r.Namespace != ns || r.Kind != (metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}) {
		return "", nil, nil, false, false
	}
	dec := func(raw []byte) (*corev1.ConfigMap, bool) {
		var cm corev1.ConfigMap
		if len(raw) == 0 || kjson.UnmarshalCaseSensitivePreserveInts(raw, &cm) != nil {
			return nil, false
		}
		return &cm, true
	}
	name = r.Name
	if cm, ok := dec(r.Object.Raw); ok && r.Operation != admissionv1.Delete {
		now, nowOK = cm.Data, true
		if name == "" {
			name = cm.Name
		}
	}
	if cm, ok := dec(r.OldObject.Raw); ok && r.Operation != admissionv1.Create {
		old, oldOK = cm.Data, true
		if name == "" {
			name = cm.Name
		}
	}
	return name, now, old, nowOK, oldOK
}

// configMapArmsReader: a CREATE or UPDATE of ConfigMap noetl/flags whose new "fencing" is enforce
// and whose old one (if the review is an UPDATE with an old object) was not: the empty cluster's
// reader becomes armed.
func configMapArmsReader(body []byte) bool {
	r := decodeRequest(body)
	name, now, old, nowOK, oldOK := configMapOf(r)
	if name != "flags" || !nowOK || (r.Operation != admissionv1.Create && r.Operation != admissionv1.Update) {
		return false
	}
	armed := func(d map[string]string) bool {
		v, ok := d["fencing"]
		return ok && strings.EqualFold(strings.TrimSpace(v), "enforce")
	}
	if r.Operation == admissionv1.Update && oldOK && armed(old) {
		return false // an old object that does not decode counts as none: the change arms
	}
	return armed(now)
}

// configMapDisarmsBoundWriter: an UPDATE or DELETE of ConfigMap noetl/flags whose old content ran
// the bound writer (the kubelet model's env, the writer's own parser) armed with its election on
// for shard 0 of noetl — the shard whose Lease is live — and whose new content (none, on DELETE)
// starts it armed with its election off, without a shard, or on another shard or namespace.
func configMapDisarmsBoundWriter(body []byte) bool {
	r := decodeRequest(body)
	name, now, old, nowOK, oldOK := configMapOf(r)
	if name != "flags" || !oldOK || (r.Operation != admissionv1.Update && r.Operation != admissionv1.Delete) ||
		(r.Operation == admissionv1.Update && !nowOK) {
		return false
	}
	c := fuzzBoundWriter().Spec.Template.Spec.Containers[0]
	run := func(data map[string]string, exists bool) (cfg electionenv.Config, armed bool) {
		cms := map[string]map[string]string{}
		if exists {
			cms["flags"] = data
		}
		env, started := kubeletEnv(&c, ns, cms, nil)
		if !started {
			return cfg, false
		}
		env["HOSTNAME"] = wt.WriterName + "-0"
		cfg, _ = electionenv.Parse(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		return cfg, electionenv.FenceArmed(env[webhook.EnvFencing])
	}
	before, armed := run(old, true)
	if !armed || !before.Enabled || !before.HasShard || before.Shard != 0 || before.Namespace != ns {
		return false
	}
	after, armed := run(now, r.Operation == admissionv1.Update)
	return armed && (!after.Enabled || !after.HasShard || after.Shard != 0 || after.Namespace != ns)
}

// disarmsTheBoundWriter: a change of the bound cluster's RBAC or ServiceAccount after which the
// writer can no longer run its election: its ServiceAccount deleted or its token no longer
// mounted (automountServiceAccountToken false, which the writer's pod does not override), the
// chart's RoleBinding deleted or no longer binding it to the chart's Role, or the chart's Role
// deleted or no longer granting get, create or update on leases in any form.
func disarmsTheBoundWriter(body []byte) bool {
	r := decodeRequest(body)
	if r == nil || r.SubResource != "" || r.Namespace != ns || (r.Operation != admissionv1.Delete && r.Operation != admissionv1.Update) {
		return false
	}
	named := func(want string, raw []byte) bool {
		var m metav1.PartialObjectMetadata
		return r.Name == want || (r.Name == "" && len(raw) > 0 && kjson.UnmarshalCaseSensitivePreserveInts(raw, &m) == nil && m.Name == want)
	}
	switch r.Kind {
	case saGVK:
		var old, cur corev1.ServiceAccount
		if kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) != nil || !named(wt.WriterSA, r.OldObject.Raw) {
			return false
		}
		if r.Operation == admissionv1.Delete {
			return true
		}
		mounted := func(sa *corev1.ServiceAccount) bool {
			return sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken
		}
		return mounted(&old) && kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &cur) == nil && !mounted(&cur)
	case rbKind:
		if !named(chartRole, r.OldObject.Raw) {
			return false
		}
		was, ok := bindsTheWriter(r.OldObject.Raw)
		if !ok || !was {
			return false
		}
		if r.Operation == admissionv1.Delete {
			return true
		}
		still, ok := bindsTheWriter(r.Object.Raw)
		return ok && !still
	case roleKind:
		if !named(chartRole, r.OldObject.Raw) {
			return false
		}
		was, ok := grantsTheWriter(r.OldObject.Raw, true)
		if !ok || !was {
			return false
		}
		if r.Operation == admissionv1.Delete {
			return true
		}
		still, ok := grantsTheWriter(r.Object.Raw, false)
		return ok && !still
	}
	return false
}

// The bound cluster's RBAC beyond the chart's: fzChartLeaseRule is the chart's writer rule (the
// lease verbs and VerbElect); fzWildRole a ClusterRole granting every verb on leases, bound to no
// one, so a binding that gives it to the writer disarms it under the lease guard.
var (
	fzChartLeaseRule = rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "watch", "create", "update", webhook.VerbElect}}
	fzWildRule = rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}
)

const fzWildRole = "fz-wild"

// grantsTheBoundWriterEveryLeaseVerb: a CREATE or UPDATE that, by the RBAC authorizer's rules,
// grants the bound writer's account every verb on its Lease (shard 0's) where it did not hold it:
// the chart's Role edited to a rule with "*" or the lease guard's probe verb on it, or a binding
// (RoleBinding in the namespace, ClusterRoleBinding) of fzWildRole made or given a subject that
// applies to the account. The bound cluster's lease guard then refuses its every Lease write.
func grantsTheBoundWriterEveryLeaseVerb(body []byte) bool {
	r := decodeRequest(body)
	if r == nil || r.SubResource != "" || (r.Operation != admissionv1.Create && r.Operation != admissionv1.Update) {
		return false
	}
	switch r.Kind {
	case roleKind:
		var old, cur rbacv1.Role
		return r.Operation == admissionv1.Update && r.Namespace == ns && r.Name == chartRole &&
			kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) == nil && kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &cur) == nil &&
			(old.Name == "" || old.Name == chartRole) && (cur.Name == "" || cur.Name == chartRole) &&
			!rulesGiveEveryVerbOn(old.Rules, fzWriterLease) && rulesGiveEveryVerbOn(cur.Rules, fzWriterLease)
	case rbKind, crbKind:
		if (r.Kind == rbKind) != (r.Namespace == ns) || (r.Kind == crbKind && r.Namespace != "") {
			return false
		}
		var old, cur rbacv1.RoleBinding // a ClusterRoleBinding decodes into one (no namespace)
		if kjson.UnmarshalCaseSensitivePreserveInts(r.Object.Raw, &cur) != nil || cur.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: fzWildRole}) ||
			!subjectsApplyToTheWriter(cur.Subjects, r.Namespace) {
			return false
		}
		if r.Operation == admissionv1.Create {
			return true
		}
		return kjson.UnmarshalCaseSensitivePreserveInts(r.OldObject.Raw, &old) == nil && old.RoleRef == cur.RoleRef && !subjectsApplyToTheWriter(old.Subjects, r.Namespace)
	}
	return false
}

// fzWriterLease is the bound writer's Lease.
var fzWriterLease = electionenv.LeaseName(0)

// rulesGiveEveryVerbOn: a rule matches the lease guard's probe on Lease name in coordination.k8s.io
// (the authorizer's VerbMatches, APIGroupMatches, ResourceMatches and ResourceNameMatches).
func rulesGiveEveryVerbOn(rules []rbacv1.PolicyRule, name string) bool {
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, rule := range rules {
		if has(rule.APIGroups, "coordination.k8s.io") && has(rule.Resources, "leases") && has(rule.Verbs, webhook.VerbWildcardProbe) &&
			(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// isClusterRoleReview: the body is a review of a ClusterRole.
func isClusterRoleReview(body []byte) bool {
	r := decodeRequest(body)
	return r != nil && r.Kind == crKind
}

// bindsTheWriter: raw is a RoleBinding of the chart's Role with a subject the RBAC authorizer
// applies to the writer's ServiceAccount (ok: it decodes). As the authorizer matches subjects
// (plugin/pkg/auth/authorizer/rbac appliesToUser): the ServiceAccount itself, the User its token
// authenticates as, or a Group the token carries.
func bindsTheWriter(raw []byte) (binds, ok bool) {
	var rb rbacv1.RoleBinding
	if len(raw) == 0 || kjson.UnmarshalCaseSensitivePreserveInts(raw, &rb) != nil {
		return false, false
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != chartRole {
		return false, true
	}
	return subjectsApplyToTheWriter(rb.Subjects, ns), true
}

// subjectsApplyToTheWriter: one of a binding's subjects is, to the RBAC authorizer, the writer's
// ServiceAccount (appliesToUser: a ServiceAccount subject without a namespace is in the binding's,
// bindingNS; "" for a ClusterRoleBinding, where it matches no account).
func subjectsApplyToTheWriter(subjects []rbacv1.Subject, bindingNS string) bool {
	for _, s := range subjects {
		switch s.Kind {
		case "ServiceAccount":
			if s.Name == wt.WriterSA && (s.Namespace == ns || s.Namespace == "" && bindingNS == ns) {
				return true
			}
		case "User":
			if s.Name == "system:serviceaccount:"+ns+":"+wt.WriterSA {
				return true
			}
		case "Group":
			if s.Name == "system:serviceaccounts" || s.Name == "system:serviceaccounts:"+ns || s.Name == "system:authenticated" {
				return true
			}
		}
	}
	return false
}

// grantsTheWriter: raw is a Role whose rules may grant each of get, create, update and VerbElect
// (which the bound cluster's lease guard admits the writer by) on leases
// (any rule naming the verb, or *, on coordination.k8s.io or *, leases or *). With exact, only a
// rule that names no resources counts: the bound cluster's authorizer grants the writer every
// Lease (its SubjectAccessReviews ask without a name first), and a rule naming resources grants
// only requests for those names (the authorizer's ResourceNameMatches), so "grants" means the
// Role is what backs those answers. Without it, whatever its resourceNames: an over-approximation,
// so "does not grant" is certain.
func grantsTheWriter(raw []byte, exact bool) (grants, ok bool) {
	var role rbacv1.Role
	if len(raw) == 0 || kjson.UnmarshalCaseSensitivePreserveInts(raw, &role) != nil {
		return false, false
	}
	has := func(list []string, v string) bool {
		for _, x := range list {
			if x == v || x == "*" {
				return true
			}
		}
		return false
	}
	for _, verb := range []string{"get", "create", "update", webhook.VerbElect} {
		granted := false
		for _, rule := range role.Rules {
			granted = granted || (has(rule.APIGroups, "coordination.k8s.io") && has(rule.Resources, "leases") && has(rule.Verbs, verb) && (!exact || len(rule.ResourceNames) == 0))
		}
		if !granted {
			return false, true
		}
	}
	return true, true
}

// TestMayMentionEnforce: the oracles' prefilter never skips a body whose values can decode to
// enforce.
func TestMayMentionEnforce(t *testing.T) {
	for body, want := range map[string]bool{
		`{"value":"enforce"}`:        true,
		`{"value":" EnForce\t"}`:     true,
		`{"value":"\u0065nforce"}`:   true,
		`{"value":"off","x":"enfo"}`: false,
	} {
		if got := mayMentionEnforce([]byte(body)); got != want {
			t.Errorf("mayMentionEnforce(%s) = %v, want %v", body, got, want)
		}
		var v struct{ Value string }
		if json.Unmarshal([]byte(body), &v) == nil && strings.EqualFold(strings.TrimSpace(v.Value), "enforce") && !mayMentionEnforce([]byte(body)) {
			t.Errorf("%s decodes to enforce but is skipped", body)
		}
	}
}
