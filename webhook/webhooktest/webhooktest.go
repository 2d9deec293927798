// Package webhooktest has what tests of the guard share: the reference writer StatefulSet
// (SPEC.md "Reference deployment") and a fake Resolver that records its lookups.
package webhooktest

import (
	"context"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/noetl/ehdb-election/internal/electionenv"
	"github.com/noetl/ehdb-election/webhook"
)

// Reference deployment facts.
const (
	Namespace      = "noetl"
	WriterName     = "noetl-cmdbus-writer"
	ContainerName  = "noetl-worker"
	WriterSA       = "noetl-cmdbus-writer"
	HeadlessName   = "noetl-cmdbus-writer-headless"
	Shard0LeaseKey = "ehdb-shard-00000000"
)

// ReferenceWriter returns the writer StatefulSet as it runs today: replicas 1, Parallel pod
// management, grace period 60 s, one container noetl-worker with metrics on 9090, the shard
// from the ordinal in HOSTNAME, no serviceAccountName (so "default") and fencing off.
// Use the options to arm it, enable the election and give it its ServiceAccount.
func ReferenceWriter(namespace string, opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	labels := map[string]string{
		"app":         WriterName,
		"component":   "cmdbus-writer",
		"command-bus": "ehdb",
		"managed-by":  "noetl",
	}
	sts := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: WriterName, Namespace: namespace, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](1),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			ServiceName:         HeadlessName,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": WriterName}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []corev1.Container{{
						Name:  ContainerName,
						Image: "ghcr.io/noetl/worker:latest",
						Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090}},
						Env: []corev1.EnvVar{
							{Name: "NOETL_EHDB_FENCING", Value: "off"},
							{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
						},
					}},
				},
			},
		},
	}
	for _, o := range opts {
		o(sts)
	}
	return sts
}

// SetEnv sets (or adds) a literal variable in the writer container.
func SetEnv(name, value string) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		c := &s.Spec.Template.Spec.Containers[0]
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i] = corev1.EnvVar{Name: name, Value: value}
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
	}
}

// Armed sets NOETL_EHDB_FENCING=enforce.
func Armed() func(*appsv1.StatefulSet) { return SetEnv(webhook.EnvFencing, "enforce") }

// ElectionOn sets NOETL_EHDB_ELECTION=true.
func ElectionOn() func(*appsv1.StatefulSet) { return SetEnv(electionenv.EnvElection, "true") }

// ServiceAccount sets the pod's serviceAccountName.
func ServiceAccount(name string) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.ServiceAccountName = name }
}

// Replicas sets the replica count.
func Replicas(n int32) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To(n) }
}

// LiveLease is a Lease as a minting election leaves it: held, renewed at renewed, epoch epoch.
func LiveLease(namespace string, shard uint32, renewed time.Time, epoch int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: electionenv.LeaseName(shard), Namespace: namespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(WriterName + "-0#00000000-0000-0000-0000-000000000000"),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &metav1.MicroTime{Time: renewed},
			RenewTime:            &metav1.MicroTime{Time: renewed},
			LeaseTransitions:     ptr.To(epoch),
		},
	}
}

// Resolver is a fake webhook.Resolver over fixed answers. Anything not listed is NotFound,
// access not listed is denied. It records every lookup.
type Resolver struct {
	ConfigMaps   map[string]map[string]string // present ConfigMaps' data
	ConfigMapErr map[string]error
	// ConfigMapChanged is when each ConfigMap last changed, as the API server records it (none:
	// it kept no record).
	ConfigMapChanged map[string]time.Time
	ServiceAccounts  map[string]map[string]string // present ServiceAccounts' annotations
	// NoAutomount lists ServiceAccounts with automountServiceAccountToken: false.
	NoAutomount map[string]bool
	SAErr       error
	// Allowed lists granted access (a grant without a Lease name covers every name); AccessErr
	// fails every access check; EvaluationError is put on every refusal.
	Allowed         map[webhook.AccessCheck]bool
	AccessErr       error
	EvaluationError string
	Leases          map[types.NamespacedName]coordinationv1.LeaseSpec
	LeaseErr        error
	// Renewals, when not nil, is a renewal clock (webhook.LeaseFact.Observed): when this process
	// saw each Lease's renewTime change; a Lease absent from it was never seen renewing.
	Renewals map[types.NamespacedName]time.Time
	// The RBAC objects an RBAC change is judged against (Query.Bindings and Query.Roles); RBACErr
	// fails every such lookup. They answer no access check: Allowed does.
	RoleBindings        []rbacv1.RoleBinding
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
	Roles               []rbacv1.Role
	ClusterRoles        []rbacv1.ClusterRole
	RBACErr             error
	// ClusterRolesUnread, with RBACErr, is a ClusterRole list the webhook is forbidden.
	ClusterRolesUnread string
	// BindingsErr fails the listing of the bindings of one scope (a namespace the webhook may not
	// read, say).
	BindingsErr map[string]error
	// Unrecorded keeps Queries empty: a resolver that answers a fuzzer's millions of reviews must
	// not hold every one of them.
	Unrecorded bool
	// LeaseGuards are the lease guards by namespace; a namespace not listed has none.
	LeaseGuards map[string]webhook.LeaseGuardFact

	mu      sync.Mutex
	Queries []webhook.Query
}

// GrantNamed allows the ServiceAccount ns/name the verbs on the Lease lease in leaseNS only.
func (r *Resolver) GrantNamed(ns, name, leaseNS, lease string, verbs ...string) {
	if r.Allowed == nil {
		r.Allowed = map[webhook.AccessCheck]bool{}
	}
	for _, v := range verbs {
		r.Allowed[webhook.AccessCheck{ServiceAccount: types.NamespacedName{Namespace: ns, Name: name}, Namespace: leaseNS, Verb: v, Name: lease}] = true
	}
}

// Grant allows the ServiceAccount ns/name the verbs on leases in leaseNS.
func (r *Resolver) Grant(ns, name, leaseNS string, verbs ...string) {
	if r.Allowed == nil {
		r.Allowed = map[webhook.AccessCheck]bool{}
	}
	for _, v := range verbs {
		r.Allowed[webhook.AccessCheck{ServiceAccount: types.NamespacedName{Namespace: ns, Name: name}, Namespace: leaseNS, Verb: v}] = true
	}
}

// Lookups is the number of lookups made so far.
func (r *Resolver) Lookups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.Queries {
		n += q.Size()
	}
	return n
}

// Resolve implements webhook.Resolver.
func (r *Resolver) Resolve(_ context.Context, q webhook.Query) *webhook.Facts {
	if !r.Unrecorded {
		r.mu.Lock()
		r.Queries = append(r.Queries, q)
		r.mu.Unlock()
	}
	f := webhook.NewFacts(time.Time{})
	for _, name := range q.ConfigMaps {
		switch data, ok := r.ConfigMaps[name]; {
		case r.ConfigMapErr[name] != nil:
			f.ConfigMaps[name] = webhook.ConfigMapFact{Err: r.ConfigMapErr[name]}
		case ok:
			f.ConfigMaps[name] = webhook.ConfigMapFact{Data: data, Changed: r.ConfigMapChanged[name]}
		default:
			f.ConfigMaps[name] = webhook.ConfigMapFact{NotFound: true}
		}
	}
	for _, name := range q.ServiceAccounts {
		switch ann, ok := r.ServiceAccounts[name]; {
		case r.SAErr != nil:
			f.ServiceAccounts[name] = webhook.ServiceAccountFact{Err: r.SAErr}
		case ok:
			fact := webhook.ServiceAccountFact{Annotations: ann}
			if r.NoAutomount[name] {
				fact.AutomountToken = ptr.To(false)
			}
			f.ServiceAccounts[name] = fact
		default:
			f.ServiceAccounts[name] = webhook.ServiceAccountFact{NotFound: true}
		}
	}
	for _, c := range q.Access {
		if r.AccessErr != nil {
			f.Access[c] = webhook.AccessFact{Err: r.AccessErr}
			continue
		}
		wide := c
		wide.Name = ""
		if r.Allowed[c] || r.Allowed[wide] {
			f.Access[c] = webhook.AccessFact{Allowed: true}
		} else {
			f.Access[c] = webhook.AccessFact{EvaluationError: r.EvaluationError}
		}
	}
	for _, ns := range q.LeaseGuards {
		f.LeaseGuards[ns] = r.LeaseGuards[ns]
	}
	for _, scope := range q.Bindings {
		var fact webhook.BindingsFact
		switch {
		case r.RBACErr != nil:
			fact.Err = r.RBACErr
		case r.BindingsErr[scope] != nil:
			fact.Err = r.BindingsErr[scope]
		case scope == "":
			for i := range r.ClusterRoleBindings {
				fact.Items = append(fact.Items, webhook.BindingOfClusterRoleBinding(&r.ClusterRoleBindings[i]))
			}
		default:
			for i := range r.RoleBindings {
				if scope == "*" || r.RoleBindings[i].Namespace == scope {
					fact.Items = append(fact.Items, webhook.BindingOfRoleBinding(&r.RoleBindings[i]))
				}
			}
		}
		f.Bindings[scope] = fact
	}
	for _, k := range q.Roles {
		fact := webhook.RoleFact{NotFound: true}
		switch {
		case r.RBACErr != nil:
			fact = webhook.RoleFact{Err: r.RBACErr}
		case k.Namespace == "":
			for _, cr := range r.ClusterRoles {
				if cr.Name == k.Name {
					fact = webhook.RoleFact{Rules: cr.Rules}
				}
			}
		default:
			for _, role := range r.Roles {
				if role.Namespace == k.Namespace && role.Name == k.Name {
					fact = webhook.RoleFact{Rules: role.Rules}
				}
			}
		}
		f.Roles[k] = fact
	}
	if q.ClusterRoles {
		fact := webhook.ClusterRolesFact{Err: r.RBACErr, Unread: r.ClusterRolesUnread}
		if r.RBACErr == nil {
			for i := range r.ClusterRoles {
				fact.Items = append(fact.Items, webhook.ClusterRoleInfoOf(&r.ClusterRoles[i]))
			}
		}
		f.ClusterRoles = &fact
	}
	for _, k := range q.Leases {
		switch spec, ok := r.Leases[k]; {
		case r.LeaseErr != nil:
			f.Leases[k] = webhook.LeaseFact{Err: r.LeaseErr}
		case ok:
			f.Leases[k] = webhook.LeaseFact{Spec: spec}
			if r.Renewals != nil {
				fact := f.Leases[k]
				fact.Observed, fact.Renewed = true, r.Renewals[k]
				f.Leases[k] = fact
			}
		default:
			f.Leases[k] = webhook.LeaseFact{NotFound: true}
		}
	}
	return f
}
