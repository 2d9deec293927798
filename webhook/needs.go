package webhook

import (
	admissionv1 "k8s.io/api/admission/v1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// Needs returns the lookups Decide still lacks for in. It asks for nothing when nothing can be
// armed: an unarmed object is decided without a single API call. ConfigMaps come first (they
// decide whether anything is armed); ServiceAccount, access and Lease lookups are asked for as
// soon as something is known to be armed; access reviews for single Leases by name only once the
// namespace-wide review has refused. Call it until it returns an empty Query.
func Needs(in Input, f *Facts, p Policy) Query {
	w := in.Object
	if w == nil || in.unjudgedInDeletion() || tooManyConfigMaps(w, p) > 0 {
		return Query{}
	}
	budget := in.budget()
	b := newQueryBuilder(f, w.Namespace)
	cms := in.configMapsFor(f.configMaps(), false)
	views := view(w, cms, budget)
	asRunning(in, views, f) // as Decide judges it
	anyArmed := false
	for i := range views {
		v := &views[i]
		for _, name := range v.pending {
			b.configMap(name)
		}
		if v.armed {
			anyArmed = true
			// Everything the election reads may come from a ConfigMap.
			for _, name := range referencedConfigMaps(v.c) {
				if in.ConfigMapChange == nil || name != in.ConfigMapChange.Name {
					b.configMap(name)
				}
			}
		}
	}
	if !anyArmed || budget.Exhausted() {
		return b.query()
	}
	if in.Operation == admissionv1.Update && in.Old != nil {
		for _, ov := range view(in.Old, in.configMapsFor(f.configMaps(), true), budget) {
			for _, name := range ov.pending {
				b.configMap(name)
			}
		}
	}
	scope := orderScopeOf(in, in.configMapsFor(f.configMaps(), false), in.configMapsFor(f.configMaps(), true), budget, p)
	sa := ServiceAccountName(w.Pod.Spec)
	if sa != "default" {
		b.serviceAccount(sa)
	}
	saKey := types.NamespacedName{Namespace: w.Namespace, Name: sa}
	// Under an RBAC change, the access the change leaves decides which reviews by name follow.
	after := f
	if c := in.RBACChange; c != nil {
		c.needs(f, b)
		after = c.apply(f, w)
	}
	for i := range views {
		v := &views[i]
		if !v.armed || hasPendingConfigMaps(in, v.c, f) {
			continue
		}
		ev := judgeElection(w, v.env, p.maxShards())
		if !ev.namespace.Known() {
			continue
		}
		ns := ev.namespace.Text
		shardsKnown := ev.shardProblem == "" && ev.tooMany == 0
		if c := in.RBACChange; c != nil && sa != "default" && electsElsewhere(w, v, cms, f, budget) != "" {
			c.needsTaken(f, b, saKey, c.reach(p, w, []string{ns}))
		}
		if sa != "default" {
			b.leaseGuard(ns)
			verbs := requiredVerbs
			if g, ok := after.LeaseGuards[ns]; ok && g.asksAuthorizer(saKey) {
				verbs = leaseVerbs // once the lease guard is known to admit the account by its grants
			}
			for _, verb := range verbs {
				wide := AccessCheck{ServiceAccount: saKey, Namespace: ns, Verb: verb}
				b.access(wide)
				// A Role may grant every verb but create by resourceNames: ask for each shard's
				// Lease once the namespace-wide review has refused (create cannot be restricted by
				// name; the lease guard asks the authorizer about the Lease by name).
				if a, ok := after.Access[wide]; ok && a.Err == nil && !a.Allowed && verb != "create" && shardsKnown {
					for _, s := range ev.shards {
						b.access(AccessCheck{ServiceAccount: saKey, Namespace: ns, Verb: verb, Name: electionenv.LeaseName(s)})
					}
				}
			}
		}
		b.access(AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"})
		if shardsKnown && p.leasesReadable(ns) {
			for _, s := range scope.added(ns, ev.shards) {
				b.lease(types.NamespacedName{Namespace: ns, Name: electionenv.LeaseName(s)})
			}
		}
	}
	return b.query()
}
