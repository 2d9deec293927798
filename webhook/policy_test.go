package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

const ns = wt.Namespace

// compliant is the reference writer with everything the guard asks for.
func compliant() []func(*appsv1.StatefulSet) {
	return []func(*appsv1.StatefulSet){wt.Armed(), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA)}
}

// goodCluster is a cluster where the writer's SA exists and is bound, and shard 0 is live.
func goodCluster() *wt.Resolver {
	r := &wt.Resolver{
		ServiceAccounts: map[string]map[string]string{wt.WriterSA: nil, "default": nil},
		Leases:          map[types.NamespacedName]coordinationv1.LeaseSpec{},
	}
	r.Grant(ns, wt.WriterSA, ns, "get", "list", "watch", "create", "update")
	r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now.Add(-5*time.Second), 1).Spec
	return r
}

func lease(namespace string, shard uint32) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: electionenv.LeaseName(shard)}
}

func workload(t testing.TB, gvk schema.GroupVersionKind, obj any) *webhook.Workload {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	w, err := webhook.DecodeWorkload(gvk, ns, raw)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var (
	gvkSTS = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	gvkDep = appsv1.SchemeGroupVersion.WithKind("Deployment")
	gvkRS  = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	gvkPod = corev1.SchemeGroupVersion.WithKind("Pod")
	gvkCJ  = batchv1.SchemeGroupVersion.WithKind("CronJob")
)

func sts(opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	return wt.ReferenceWriter(ns, opts...)
}

// container edits the writer container.
func container(f func(c *corev1.Container)) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { f(&s.Spec.Template.Spec.Containers[0]) }
}

func unsetEnv(name string) func(*appsv1.StatefulSet) {
	return container(func(c *corev1.Container) {
		c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	})
}

func envVar(e corev1.EnvVar) func(*appsv1.StatefulSet) {
	return container(func(c *corev1.Container) {
		c.Env = slices.DeleteFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name })
		c.Env = append(c.Env, e)
	})
}

func appendEnv(e corev1.EnvVar) func(*appsv1.StatefulSet) {
	return container(func(c *corev1.Container) { c.Env = append(c.Env, e) })
}

func envFrom(f corev1.EnvFromSource) func(*appsv1.StatefulSet) {
	return container(func(c *corev1.Container) { c.EnvFrom = append(c.EnvFrom, f) })
}

func cmEnvFrom(name, prefix string) corev1.EnvFromSource {
	return corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func cmKey(name, cm, key string, optional bool) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key, Optional: ptr.To(optional)}}}
}

func secretKey(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

type row struct {
	name    string
	sts     []func(*appsv1.StatefulSet) // applied after compliant()
	bare    bool                        // start from the reference writer as it runs today instead
	cluster func(r *wt.Resolver)
	input   func(t testing.TB) webhook.Input // overrides sts
	old     []func(*appsv1.StatefulSet)      // UPDATE from this (after compliant() unless oldBare)
	oldBare bool
	policy  *webhook.Policy

	allowed bool
	reason  webhook.Reason   // the decision's reason
	unmet   []webhook.Reason // every unmet requirement, in order
	msg     []string         // substrings of the denial message
	warn    []string         // substrings, one warning each
	lookups int              // -1: not checked
}

func TestPolicy(t *testing.T) {
	rows := []row{
		// --- armed or not ---------------------------------------------------------------
		{name: "today's writer: fencing off, nothing else", bare: true, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "fencing shadow", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", "shadow")}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "fencing unset: unarmed, and the image's ENV is said to be out of reach", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING")}, allowed: true, reason: webhook.ReasonUnarmed,
			warn: []string{"if its image's ENV sets NOETL_EHDB_FENCING, the guard cannot see it"}, lookups: 0},
		{name: "fencing 'enforced' is not enforce", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", "enforced")}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "fencing enforce", allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "fencing ENFORCE", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", "ENFORCE")}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "fencing with whitespace and mixed case", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", " \tEnForce\n")}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "armed, bare writer: every requirement listed", bare: true, sts: []func(*appsv1.StatefulSet){wt.Armed()},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonDefaultServiceAccount},
			msg: []string{`container "noetl-worker": election is not enabled: NOETL_EHDB_ELECTION is not set`, "Fix: set NOETL_EHDB_ELECTION=true",
				"default ServiceAccount", "spec.template.spec.serviceAccountName", "2 requirement(s) unmet"}, lookups: -1},
		{name: "armed, bare writer, lease missing too", bare: true, sts: []func(*appsv1.StatefulSet){wt.Armed()}, cluster: func(r *wt.Resolver) { clear(r.Leases) },
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonDefaultServiceAccount, webhook.ReasonLeaseNotLive},
			msg:   []string{"Lease noetl/ehdb-shard-00000000 (shard 0) does not exist", "3 requirement(s) unmet"}, lookups: -1},
		{name: "fencing from a ConfigMap key: enforce", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))},
			cluster: func(r *wt.Resolver) { r.ConfigMaps = map[string]map[string]string{"flags": {"fencing": "enforce"}} },
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "fencing from a ConfigMap key: off costs one lookup", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false))},
			cluster: func(r *wt.Resolver) { r.ConfigMaps = map[string]map[string]string{"flags": {"fencing": "off"}} },
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 1},
		{name: "fencing from a missing ConfigMap arms nothing now (its creation is reviewed)", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)), unsetEnv("NOETL_EHDB_ELECTION")},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 1},
		{name: "fencing from a missing optional ConfigMap is unset", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", true))},
			allowed: true, reason: webhook.ReasonUnarmed, warn: []string{"image's ENV"}, lookups: 1},
		{name: "fencing from an unreadable ConfigMap is unknowable", sts: []func(*appsv1.StatefulSet){envVar(cmKey("NOETL_EHDB_FENCING", "flags", "fencing", false)), unsetEnv("NOETL_EHDB_ELECTION")},
			cluster: func(r *wt.Resolver) {
				r.ConfigMapErr = map[string]error{"flags": errors.New("the server is currently unable to handle the request")}
			},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{"could not be read", "unable to handle"}, lookups: -1},
		{name: "envFrom a ConfigMap", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", ""))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "enforce"}}
			},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "envFrom with a prefix that makes the name", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), unsetEnv("NOETL_EHDB_ELECTION"), envFrom(cmEnvFrom("flags", "NOETL_EHDB_"))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"FENCING": "enforce", "ELECTION": "true"}}
			},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "envFrom with another prefix", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), envFrom(cmEnvFrom("flags", "APP_"))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "enforce"}}
			},
			allowed: true, reason: webhook.ReasonUnarmed, warn: []string{"image's ENV"}, lookups: 0},
		{name: "envFrom overridden by env", sts: []func(*appsv1.StatefulSet){onOS(corev1.Linux), wt.SetEnv("NOETL_EHDB_FENCING", "off"), envFrom(cmEnvFrom("flags", ""))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"NOETL_EHDB_FENCING": "enforce"}}
			},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "$(VAR) expansion arms", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), appendEnv(corev1.EnvVar{Name: "MODE", Value: "enforce"}),
			appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "$(MODE)"})}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "$$ escape does not expand", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), appendEnv(corev1.EnvVar{Name: "MODE", Value: "enforce"}),
			appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "$$(MODE)"})}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "unresolvable reference stays literal", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", "$(MODE)")}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "duplicates: the later off wins", sts: []func(*appsv1.StatefulSet){appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "off"})}, allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "duplicates: the later enforce wins", bare: true, sts: []func(*appsv1.StatefulSet){appendEnv(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "enforce"})},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonDefaultServiceAccount}, lookups: -1},
		{name: "fencing from a Secret is unknowable, counts as armed", sts: []func(*appsv1.StatefulSet){envVar(secretKey("NOETL_EHDB_FENCING", "writer-env", "fencing")), unsetEnv("NOETL_EHDB_ELECTION")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{`Secret \"writer-env\" key \"fencing\"`, "counts as enforce"}, lookups: -1},
		{name: "fencing from a Secret, requirements met: allowed with a warning", sts: []func(*appsv1.StatefulSet){envVar(secretKey("NOETL_EHDB_FENCING", "writer-env", "fencing"))},
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"cannot be known"}, lookups: -1},
		{name: "envFrom a Secret is unknowable", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_FENCING"), unsetEnv("NOETL_EHDB_ELECTION"),
			envFrom(corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}})},
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable, webhook.ReasonElectionUnknowable}, warn: []string{"if KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is set by envFrom Secret"},
			msg: []string{`envFrom Secret \"db\"`, "the election's namespace cannot be known",
				`Note: container \"noetl-worker\" count(s) as armed only because NOETL_EHDB_FENCING cannot be known`, "env overrides envFrom"}, lookups: -1},
		{name: "envFrom a Secret, election settings in env", sts: []func(*appsv1.StatefulSet){onOS(corev1.Linux), unsetEnv("NOETL_EHDB_FENCING"),
			wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", ns), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"),
			envFrom(corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}})},
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"counts as enforce"}, lookups: -1},
		{name: "envFrom a Secret under a prefix cannot set the fencing variable", bare: true, sts: []func(*appsv1.StatefulSet){
			envFrom(corev1.EnvFromSource{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}})},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "envFrom a Secret, fencing set in env", bare: true, sts: []func(*appsv1.StatefulSet){onOS(corev1.Linux),
			envFrom(corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}})},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "an armed init container counts", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "migrate", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_FENCING", Value: "enforce"}}}}
		}}, unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{`init container \"migrate\": election is not enabled`}, lookups: -1},
		{name: "fencing from the downward API, decided by the template", sts: []func(*appsv1.StatefulSet){
			func(s *appsv1.StatefulSet) {
				s.Spec.Template.Annotations = map[string]string{"ehdb/fencing": "enforce"}
			},
			envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['ehdb/fencing']"}}})},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "fencing from the pod name: known per ordinal in a StatefulSet, never enforce", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION"),
			envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "fencing from the pod name: unknowable in a Deployment's template", input: func(t testing.TB) webhook.Input {
			s := sts(unsetEnv("NOETL_EHDB_ELECTION"), wt.ServiceAccount(wt.WriterSA),
				envVar(corev1.EnvVar{Name: "NOETL_EHDB_FENCING", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}))
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkDep, deployment(s))}
		}, unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonShardUnknown}, lookups: -1},

		// --- election --------------------------------------------------------------------
		{name: "election 1", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "1")}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "election TRUE", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "TRUE")}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "election false", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "false")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{`NOETL_EHDB_ELECTION=\"false\" does not enable it`}, lookups: -1},
		{name: "election garbage", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "yes please")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{"not a boolean"}, lookups: -1},
		{name: "election empty", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, lookups: -1},
		{name: "election unset", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION")},
			unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{"NOETL_EHDB_ELECTION is not set"}, lookups: -1},
		{name: "election enabled in another container does not count", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION"), func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers = append(s.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Env: []corev1.EnvVar{{Name: "NOETL_EHDB_ELECTION", Value: "true"}}})
		}}, unmet: []webhook.Reason{webhook.ReasonElectionDisabled}, msg: []string{`container \"noetl-worker\"`}, lookups: -1},
		{name: "election from a ConfigMap", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION"), envFrom(cmEnvFrom("election", ""))},
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"election": {"NOETL_EHDB_ELECTION": "true"}}
			},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "election from a Secret is unknowable", sts: []func(*appsv1.StatefulSet){envVar(secretKey("NOETL_EHDB_ELECTION", "s", "e"))},
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable}, lookups: -1},
		{name: "election parser problems become warnings", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION_LEASE_SECS", "1000")},
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"clamped to 300"}, lookups: -1},

		// --- ServiceAccount --------------------------------------------------------------
		{name: "SA empty means default", sts: []func(*appsv1.StatefulSet){wt.ServiceAccount("")},
			unmet: []webhook.Reason{webhook.ReasonDefaultServiceAccount}, lookups: -1},
		{name: "SA default", sts: []func(*appsv1.StatefulSet){wt.ServiceAccount("default")},
			unmet: []webhook.Reason{webhook.ReasonDefaultServiceAccount}, lookups: -1},
		{name: "SA missing", cluster: func(r *wt.Resolver) { delete(r.ServiceAccounts, wt.WriterSA) },
			unmet: []webhook.Reason{webhook.ReasonServiceAccountMissing}, msg: []string{"ServiceAccount noetl/noetl-cmdbus-writer does not exist"}, lookups: -1},
		{name: "SA unbound", cluster: func(r *wt.Resolver) { clear(r.Allowed) },
			unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}, msg: []string{"may not get, create, update coordination.k8s.io leases in namespace noetl", "RoleBinding"}, lookups: -1},
		{name: "SA bound for get only", cluster: func(r *wt.Resolver) { clear(r.Allowed); r.Grant(ns, wt.WriterSA, ns, "get") },
			unmet: []webhook.Reason{webhook.ReasonServiceAccountUnbound}, msg: []string{"may not create, update coordination"}, lookups: -1},
		{name: "SA missing and unbound: both listed", cluster: func(r *wt.Resolver) { delete(r.ServiceAccounts, wt.WriterSA); clear(r.Allowed) },
			unmet: []webhook.Reason{webhook.ReasonServiceAccountMissing, webhook.ReasonServiceAccountUnbound}, lookups: -1},
		{name: "SA lookup fails: could not verify", cluster: func(r *wt.Resolver) { r.SAErr = errors.New("connection refused") },
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, msg: []string{"could not verify ServiceAccount noetl/noetl-cmdbus-writer: connection refused"}, lookups: -1},
		{name: "access review fails: could not verify", cluster: func(r *wt.Resolver) { r.AccessErr = errors.New("forbidden") },
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, msg: []string{"could not verify that ServiceAccount"}, lookups: -1},
		{name: "election namespace elsewhere: access is checked there", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", "leases")},
			cluster: func(r *wt.Resolver) { r.Leases[lease("leases", 0)] = r.Leases[lease(ns, 0)] },
			unmet:   []webhook.Reason{webhook.ReasonServiceAccountUnbound}, msg: []string{"leases in namespace leases"}, lookups: -1},

		// --- the order check -------------------------------------------------------------
		{name: "no Lease", cluster: func(r *wt.Resolver) { clear(r.Leases) },
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"Lease noetl/ehdb-shard-00000000 (shard 0) does not exist", "NOETL_EHDB_FENCING=shadow"}, lookups: -1},
		{name: "expired Lease", cluster: func(r *wt.Resolver) {
			r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now.Add(-15*time.Second-time.Nanosecond), 3).Spec
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"expired at"}, lookups: -1},
		{name: "Lease live at exactly renewTime + duration", cluster: func(r *wt.Resolver) {
			r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now.Add(-15*time.Second), 3).Spec
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "Lease with epoch 0", cluster: func(r *wt.Resolver) { r.Leases[lease(ns, 0)] = wt.LiveLease(ns, 0, now, 0).Spec },
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"epoch (leaseTransitions) 0"}, lookups: -1},
		{name: "released Lease", cluster: func(r *wt.Resolver) {
			l := wt.LiveLease(ns, 0, now, 4)
			l.Spec.HolderIdentity = ptr.To("")
			r.Leases[lease(ns, 0)] = l.Spec
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"is not held"}, lookups: -1},
		{name: "Lease lookup fails", cluster: func(r *wt.Resolver) { r.LeaseErr = errors.New("i/o timeout") },
			unmet: []webhook.Reason{webhook.ReasonCouldNotVerify}, msg: []string{"could not verify Lease noetl/ehdb-shard-00000000 (shard 0): i/o timeout"}, lookups: -1},
		{name: "order check switched off", policy: &webhook.Policy{}, cluster: func(r *wt.Resolver) { clear(r.Leases) },
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "update armed to armed: no order check", old: []func(*appsv1.StatefulSet){}, cluster: func(r *wt.Resolver) { clear(r.Leases) },
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "update unarmed to armed: order check", old: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_FENCING", "shadow")}, cluster: func(r *wt.Resolver) { clear(r.Leases) },
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, lookups: -1},
		{name: "update armed to armed still gets the static checks", old: []func(*appsv1.StatefulSet){}, sts: []func(*appsv1.StatefulSet){wt.ServiceAccount("")},
			unmet: []webhook.Reason{webhook.ReasonDefaultServiceAccount}, lookups: -1},
		{name: "three replicas: every ordinal's Lease", sts: []func(*appsv1.StatefulSet){wt.Replicas(3)}, cluster: func(r *wt.Resolver) {
			r.Leases[lease(ns, 2)] = wt.LiveLease(ns, 2, now, 1).Spec
		}, unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000001 (shard 1) does not exist"}, lookups: -1},
		{name: "ordinals start at 5", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) { s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 5} }},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-00000005 (shard 5)"}, lookups: -1},
		{name: "zero replicas: no shard to check", sts: []func(*appsv1.StatefulSet){wt.Replicas(0)}, cluster: func(r *wt.Resolver) { clear(r.Leases) },
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"runs no pods"}, lookups: -1},
		{name: "explicit shard 255", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "255")},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"ehdb-shard-000000ff (shard 255)"}, lookups: -1},
		{name: "garbage shard stops the election: refused even without the order check", policy: &webhook.Policy{},
			sts:   []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "zero")},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"not a shard number", "would not run"}, lookups: -1},
		{name: "hostname as FQDN ends in the node's cluster domain: the shard cannot be told", sts: []func(*appsv1.StatefulSet){func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.SetHostnameAsFQDN = ptr.To(true) }},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"setHostnameAsFQDN", "cluster domain"}, lookups: -1},
		{name: "HOSTNAME set in the container", sts: []func(*appsv1.StatefulSet){wt.SetEnv("HOSTNAME", "writer-7")},
			unmet: []webhook.Reason{webhook.ReasonLeaseNotLive}, msg: []string{"(shard 7)"}, lookups: -1},
		{name: "Deployment without a shard", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkDep, deployment(sts(compliant()...)))}
		}, unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{"pods of a Deployment are named by its controller", "set NOETL_EHDB_ELECTION_SHARD"}, lookups: -1},
		{name: "Deployment with a shard", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkDep, deployment(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...)))}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a Pod gets the static checks only", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, pod(sts(compliant()...), "noetl-cmdbus-writer-0"))}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "a Pod on the default SA is refused", input: func(t testing.TB) webhook.Input {
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkPod, pod(sts(wt.Armed(), wt.ElectionOn()), "noetl-cmdbus-writer-0"))}
		}, unmet: []webhook.Reason{webhook.ReasonDefaultServiceAccount}, msg: []string{"spec.serviceAccountName"}, lookups: -1},
		{name: "a controlled ReplicaSet is not order-checked", cluster: func(r *wt.Resolver) { clear(r.Leases) }, input: func(t testing.TB) webhook.Input {
			d := deployment(sts(append(compliant(), wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0"))...))
			rs := &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
				ObjectMeta: metav1.ObjectMeta{Name: "w-abc", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "apps/v1", Kind: "Deployment", Name: "w", UID: "u", Controller: ptr.To(true)}}},
				Spec: appsv1.ReplicaSetSpec{Template: d.Spec.Template}}
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkRS, rs)}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"order check skipped: the controller apps/v1 Deployment \"w\""}, lookups: -1},
		{name: "a CronJob's template is judged", input: func(t testing.TB) webhook.Input {
			s := sts(wt.Armed())
			cj := &batchv1.CronJob{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"}, ObjectMeta: metav1.ObjectMeta{Name: "cj", Namespace: ns},
				Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: s.Spec.Template}}}}
			return webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkCJ, cj)}
		}, unmet: []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonDefaultServiceAccount, webhook.ReasonShardUnknown},
			msg: []string{"spec.jobTemplate.spec.template.spec.serviceAccountName"}, lookups: -1},
		{name: "an object being deleted is let go", sts: []func(*appsv1.StatefulSet){wt.ServiceAccount(""), func(s *appsv1.StatefulSet) {
			s.DeletionTimestamp = &metav1.Time{Time: now}
		}}, old: []func(*appsv1.StatefulSet){}, allowed: true, reason: webhook.ReasonNoOpinion, lookups: 0},

		// --- warnings --------------------------------------------------------------------
		{name: "GKE identity on the SA", cluster: func(r *wt.Resolver) {
			r.ServiceAccounts[wt.WriterSA] = map[string]string{"iam.gke.io/gcp-service-account": "w@p.iam.gserviceaccount.com"}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"iam.gke.io/gcp-service-account"}, lookups: -1},
		{name: "EKS identity on the SA", cluster: func(r *wt.Resolver) {
			r.ServiceAccounts[wt.WriterSA] = map[string]string{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/w"}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"eks.amazonaws.com/role-arn"}, lookups: -1},
		{name: "Azure identity on the SA", cluster: func(r *wt.Resolver) {
			r.ServiceAccounts[wt.WriterSA] = map[string]string{"azure.workload.identity/client-id": "00000000-0000-0000-0000-000000000000"}
		}, allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"azure.workload.identity/client-id"}, lookups: -1},
		{name: "default SA may update leases", cluster: func(r *wt.Resolver) { r.Grant(ns, "default", ns, "update") },
			allowed: true, reason: webhook.ReasonRequirementsMet, warn: []string{"default ServiceAccount of noetl may update leases"}, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}

func runRow(t *testing.T, rw row) {
	t.Helper()
	cluster := goodCluster()
	if rw.cluster != nil {
		rw.cluster(cluster)
	}
	policy := webhook.Policy{RequireLiveLease: true}
	if rw.policy != nil {
		policy = *rw.policy
	}
	var in webhook.Input
	switch {
	case rw.input != nil:
		in = rw.input(t)
	default:
		base := compliant()
		if rw.bare {
			base = nil
		}
		in = webhook.Input{Operation: admissionv1.Create, Object: workload(t, gvkSTS, sts(append(base, rw.sts...)...))}
		if rw.old != nil {
			oldBase := compliant()
			if rw.oldBare {
				oldBase = nil
			}
			in.Operation = admissionv1.Update
			in.Old = workload(t, gvkSTS, sts(append(oldBase, rw.old...)...))
		}
	}
	d, lookups := webhook.Evaluate(context.Background(), cluster, in, policy, now)
	var got []webhook.Reason
	for _, u := range d.Unmet {
		got = append(got, u.Reason)
	}
	if d.Allowed != rw.allowed || !slices.Equal(got, rw.unmet) {
		t.Fatalf("allowed=%v unmet=%v, want allowed=%v unmet=%v\nmessage: %s\nwarnings: %q", d.Allowed, got, rw.allowed, rw.unmet, d.Message(), d.Warnings)
	}
	wantReason := rw.reason
	if !rw.allowed {
		wantReason = rw.unmet[0]
	}
	if d.Reason != wantReason {
		t.Errorf("reason %q, want %q", d.Reason, wantReason)
	}
	msg := d.Message()
	for _, m := range rw.msg {
		// Messages quote names with %q; rows write \" for a quote.
		if !strings.Contains(msg, strings.ReplaceAll(m, `\"`, `"`)) {
			t.Errorf("message lacks %q:\n%s", m, msg)
		}
	}
	for _, u := range d.Unmet {
		if u.Fix == "" || !strings.Contains(msg, u.Problem) || !strings.Contains(msg, "Fix: "+u.Fix) {
			t.Errorf("unmet %+v is not spelled out with its fix in the message:\n%s", u, msg)
		}
	}
	for _, w := range rw.warn {
		if !slices.ContainsFunc(d.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
			t.Errorf("no warning mentions %q: %q", w, d.Warnings)
		}
	}
	if len(rw.warn) == 0 && len(d.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", d.Warnings)
	}
	for _, w := range d.Warnings {
		if len(w) > 256 {
			t.Errorf("warning longer than the API server keeps (256): %q", w)
		}
	}
	if rw.lookups >= 0 && lookups != rw.lookups {
		t.Errorf("lookups %d, want %d (queries %+v)", lookups, rw.lookups, cluster.Queries)
	}
}

func deployment(s *appsv1.StatefulSet) *appsv1.Deployment {
	return &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace},
		Spec:       appsv1.DeploymentSpec{Selector: s.Spec.Selector, Template: s.Spec.Template}}
}

// pod is the writer's pod template as a Pod its StatefulSet made, as the API server hands it to
// webhooks: after the ServiceAccount admission plugin (saAdmitted).
func pod(s *appsv1.StatefulSet, name string) *corev1.Pod {
	s = s.DeepCopy()
	return saAdmitted(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: s.Spec.Template.Labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.Name, UID: "u", Controller: ptr.To(true)}}},
		Spec: s.Spec.Template.Spec})
}
