package webhook

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/internal/electionenv"
)

// Decide is the guard's policy: a pure function of the object, the old object and the facts.
// A fact it needs but does not have counts as a failed lookup, so Decide never allows an armed
// object on missing information.
func Decide(in Input, f *Facts, p Policy) Decision {
	w := in.Object
	if w == nil {
		return Decision{Reason: ReasonMalformed, Unmet: []Unmet{{Reason: ReasonMalformed, Problem: "the request carries no object."}}}
	}
	d := Decision{Subject: fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name)}
	if w.fromRevision != "" {
		d.Subject += fmt.Sprintf(" (its pods below the partition, which its controller makes from its current revision %s)", w.fromRevision)
	}
	if c := in.RBACChange; c != nil {
		f = c.apply(f, w) // the facts as the change leaves them
	}
	if c := in.ConfigMapChange; c != nil {
		d.Subject = fmt.Sprintf("%s (through ConfigMap %s/%s, which it reads)", d.Subject, w.Namespace, c.Name)
	}
	if in.unjudgedInDeletion() {
		// Finalizer removal on an object being deleted: nothing new can be armed by it, and
		// refusing would leave it stuck in deletion. A Pod in graceful deletion still runs, though,
		// so an RBAC change is judged against it (the nineteenth red team deleted an armed writer
		// with a long grace period and unbound its account during its preStop hook).
		d.Allowed, d.Reason = true, ReasonNoOpinion
		return d
	}
	where := templatePath(w.Kind)
	if n := tooManyConfigMaps(w, p); n > 0 {
		d.unmet(ReasonTooComplex,
			fmt.Sprintf("the containers read their environment from %d ConfigMaps; the guard reads at most %d per object, so it cannot tell whether %s is armed.", n, p.maxConfigMaps(), EnvFencing),
			fmt.Sprintf("read the environment from at most %d ConfigMaps (merge them), or keep the workload out of the guarded namespaces if it is not an ehdb writer.", p.maxConfigMaps()))
		d.Reason = ReasonTooComplex
		return d
	}
	budget := in.budget()
	cms := in.configMapsFor(f.configMapsFinal(), false)
	views := view(w, cms, budget)
	asRunning(in, views, f)
	var armed []*containerView
	for i := range views {
		if views[i].armed {
			armed = append(armed, &views[i])
			if len(d.Armed) < maxListed {
				d.Armed = append(d.Armed, views[i].label()+": "+views[i].why)
			}
			if views[i].unknowable && len(d.Unknowable) < maxListed {
				d.Unknowable = append(d.Unknowable, views[i].label())
			}
		}
	}
	if budget.Exhausted() {
		d.unmet(ReasonTooComplex,
			fmt.Sprintf("the pod template's environment is too large or too intricate for the guard to resolve within its per-review work budget (%d steps), so it cannot tell whether %s is armed.", DefaultBudget, EnvFencing),
			"simplify the environment (fewer envFrom sources, fewer and shorter $(VAR) references).")
		d.Armed, d.Unknowable = nil, nil
		d.Reason = ReasonTooComplex
		return d
	}
	if len(armed) == 0 {
		d.Allowed, d.Reason = true, ReasonUnarmed
		// Out of reach (README): a writer's image may set the fencing variable in its ENV.
		for i := range views {
			if _, set := views[i].env.Lookup(EnvFencing); !set {
				if _, writer := views[i].env.Lookup(electionenv.EnvElection); writer {
					d.warn(truncate(views[i].label()+" sets "+electionenv.EnvElection+" but not "+EnvFencing+": if its image's ENV sets "+EnvFencing+", the guard cannot see it; set it in the env explicitly.", 240))
				}
			}
		}
		return d
	}
	scope := orderScopeOf(in, cms, in.configMapsFor(f.configMapsFinal(), true), budget, p)
	// Disarming order: an object that was armed must keep its election while it stays armed.
	removal := ""
	if oldArmed(in, in.configMapsFor(f.configMapsFinal(), true), budget) {
		removal = fmt.Sprintf(" It is armed now: remove in the reverse order of arming (enforce → shadow): first set %s=shadow (or off) and roll it out, then turn the election off.", EnvFencing)
	}

	// 1. Election enabled, in the same container, by the writer's own parser.
	elections := make([]electionView, len(armed))
	for i, v := range armed {
		ev := judgeElection(w, v.env, p.maxShards())
		elections[i] = ev
		switch {
		case ev.enabledSet && !ev.enabledText.Known():
			d.unmet(ReasonElectionUnknowable,
				fmt.Sprintf("%s: %s cannot be known (%s), so election cannot be verified as enabled.", v.label(), electionenv.EnvElection, ev.enabledText.Unknown.String()),
				fmt.Sprintf("set %s=true in the env of %s (or in a ConfigMap it reads).", electionenv.EnvElection, v.label())+removal)
		case !ev.enabled:
			detail := electionenv.EnvElection + " is not set (election is off by default)"
			if ev.enabledSet {
				detail = fmt.Sprintf("%s=%s does not enable it", electionenv.EnvElection, ev.enabledText.shown(-1))
				if msg := problemsAbout(ev.problems, electionenv.EnvElection); msg != "" && !ev.enabledText.Read {
					detail += " (" + msg + ")"
				}
			}
			d.unmet(ReasonElectionDisabled,
				fmt.Sprintf("%s: election is not enabled: %s.", v.label(), detail),
				fmt.Sprintf("set %s=true in the env of %s, the same container that sets %s.", electionenv.EnvElection, v.label(), EnvFencing)+removal)
		case ev.tooMany > 0:
			d.unmet(ReasonTooComplex,
				fmt.Sprintf("%s: the StatefulSet has %d replicas and each pod takes its shard from its ordinal; the guard judges at most %d shards per object, so it cannot verify this one.", v.label(), ev.tooMany, p.maxShards()),
				fmt.Sprintf("run at most %d replicas per StatefulSet, or set %s explicitly.", p.maxShards(), electionenv.EnvShard))
		case ev.shardProblem != "" && ev.shardCertain:
			d.unmet(ReasonShardUnknown,
				fmt.Sprintf("%s: %s.", v.label(), ev.shardProblem),
				fmt.Sprintf("set %s to the writer's shard number (decimal), or run it as a StatefulSet whose pod hostnames end in the ordinal.", electionenv.EnvShard))
		default:
			for _, pr := range ev.problems {
				d.warn(fmt.Sprintf("%s: %v", v.label(), pr))
			}
		}
	}

	// 2. A dedicated ServiceAccount that exists, may use leases, and whose token the pod mounts.
	saName := ServiceAccountName(w.Pod.Spec)
	saKey := types.NamespacedName{Namespace: w.Namespace, Name: saName}
	var saFact *ServiceAccountFact
	if saName == "default" {
		d.unmet(ReasonDefaultServiceAccount,
			fmt.Sprintf("the pod runs as the namespace's default ServiceAccount (%s.serviceAccountName is empty or \"default\"); every pod in %s that names no ServiceAccount would share the writer's lease rights.", where, w.Namespace),
			fmt.Sprintf("set %s.serviceAccountName to the writer's dedicated ServiceAccount (the ehdb-election chart creates noetl-cmdbus-writer) and bind the lease Role to it, never to default.", where))
	} else {
		switch sa, ok := f.ServiceAccounts[saName]; {
		case !ok:
			d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not verify ServiceAccount %s: %v.", saKey, errNotLookedUp), "retry; if it persists, check the webhook's access to the API server.")
		case sa.Err != nil:
			d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not verify ServiceAccount %s: %v.", saKey, sa.Err), "retry; if it persists, check the webhook's access to the API server.")
		case sa.NotFound:
			d.unmet(ReasonServiceAccountMissing,
				fmt.Sprintf("ServiceAccount %s does not exist.", saKey),
				fmt.Sprintf("create it (the ehdb-election chart does) or correct %s.serviceAccountName.", where))
		default:
			saFact = &sa
			for _, a := range cloudIdentityAnnotations {
				if v, ok := sa.Annotations[a]; ok {
					d.warn(fmt.Sprintf("ServiceAccount %s carries the cloud identity %s=%s; a writer needs no cloud principal, use a dedicated ServiceAccount without one.", saKey, a, truncate(v, 60)))
				}
			}
		}
	}
	if automount, from, known := automountOf(w, where, saName, saFact); known {
		d.checkToken(w, where, saName, automount, from, armed)
		for i := range elections {
			if !elections[i].namespaceFromFile {
				continue
			}
			if p := namespaceFileProblem(w, armed[i], automount); p != "" {
				elections[i].namespace = Value{Unknown: &Unknown{Reasons: []string{"with no namespace in its environment the election reads " + p}}}
			}
		}
	}
	for _, v := range armed {
		d.checkAPIServer(v)
	}
	namespaces := map[string][]uint32{}
	shardsKnown := map[string]bool{}
	for i, ev := range elections {
		if !ev.namespace.Known() {
			d.unmet(ReasonElectionUnknowable,
				fmt.Sprintf("%s: the election's namespace cannot be known (%s).", armed[i].label(), ev.namespace.Unknown.String()),
				fmt.Sprintf("set %s (or POD_NAMESPACE from fieldRef metadata.namespace) to a value the guard can read.", electionenv.EnvNamespace))
			continue
		}
		ns := ev.namespace.Text
		if _, seen := shardsKnown[ns]; !seen {
			shardsKnown[ns] = true
		}
		if ev.shardProblem != "" || ev.tooMany > 0 {
			shardsKnown[ns] = false
		}
		namespaces[ns] = append(namespaces[ns], ev.shards...)
	}
	if c := in.RBACChange; c != nil && saName != "default" {
		d.checkElsewhere(c, f, p, w, saKey, armed, elections, cms, budget)
	}
	for _, ns := range sortedKeys(shardsKnown) {
		if saName != "default" {
			d.checkAccess(f, saKey, ns, namespaces[ns], shardsKnown[ns])
			d.checkLeaseGuard(f, saKey, ns, namespaces[ns], shardsKnown[ns])
		}
		if a, ok := f.Access[AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"}]; ok && a.Err == nil && a.Allowed {
			d.warn(fmt.Sprintf("the default ServiceAccount of %s may update leases in %s: any pod there can overwrite a shard's Lease; bind the lease Role to the writer's ServiceAccount only.", w.Namespace, ns))
		}
	}

	// 3. The order check, on every shard the object arms that was not armed before.
	ordered := len(d.Unmet)
	var replaced map[int]bool // for a Replacing Pod: the unmet order checks of shards elected before
	if scope.applies {
		for i, ev := range elections {
			if !ev.namespace.Known() || ev.tooMany > 0 || (ev.enabled && ev.shardCertain) {
				continue // already reported
			}
			if ev.shardProblem != "" {
				// On every review the check covers, not only the transition: an update or a
				// ConfigMap edit that leaves an armed object's shard unknowable (the host network,
				// a key removed) runs pods on shards no order check covered, or none.
				d.unmet(ReasonShardUnknown,
					fmt.Sprintf("%s: cannot tell which shard Leases to check: %s.", armed[i].label(), ev.shardProblem),
					fmt.Sprintf("set %s explicitly in %s, or run the writer as a StatefulSet.", electionenv.EnvShard, armed[i].label()))
				continue
			}
			if added := scope.added(ev.namespace.Text, ev.shards); len(added) > 0 && !p.leasesReadable(ev.namespace.Text) {
				d.unmet(ReasonLeaseUnguarded,
					fmt.Sprintf("%s: the election's Leases live in namespace %s, which this webhook is not guarding (its guarded namespaces: %s), so it can never verify them, and no lease guard protects them.", armed[i].label(), ev.namespace.Text, strings.Join(p.LeaseNamespaces, ", ")),
					fmt.Sprintf("keep the Leases in a guarded namespace (unset %s), or add %s to the chart's webhook.guardedNamespaces.", electionenv.EnvNamespace, ev.namespace.Text))
				continue
			}
			added := scope.added(ev.namespace.Text, ev.shards)
			if w.Replacing {
				elected, fresh := electedBefore(f, ev.namespace.Text, added)
				if replaced == nil {
					replaced = map[int]bool{}
				}
				before := len(d.Unmet)
				d.checkLeases(f, ev.namespace.Text, elected)
				for j := before; j < len(d.Unmet); j++ {
					replaced[j] = true
				}
				added = fresh
			}
			d.checkLeases(f, ev.namespace.Text, added)
		}
	}
	if scope.idle != "" {
		d.warn(truncate(fmt.Sprintf("order check deferred: this %s runs no pods (%s); it meets the check when it starts them (scaled up, resumed).", w.Kind, scope.idle), 240))
	}
	if scope.beyondOwner != "" {
		d.warn(truncate("order check applied although its controller was judged: "+scope.beyondOwner+".", 240))
	}
	if w.OwnerUnverified != "" {
		// The guard could not look at the owner that may have been judged: not a finding.
		for i := ordered; i < len(d.Unmet); i++ {
			if w.Replacing && !replaced[i] {
				continue
			}
			d.Unmet[i].Reason = ReasonCouldNotVerify
			d.Unmet[i].Problem = truncate("could not verify that "+w.OwnerUnverified+" was order-checked for this Pod, and "+d.Unmet[i].Problem, 400)
		}
	}
	if w.Controller != "" && !w.Exempt && in.ConfigMapChange == nil && in.RBACChange == nil {
		d.warn(truncate(fmt.Sprintf("controlled by %s, which exempts it from nothing: this %s was judged itself, order check included.", w.Controller, w.Kind), 240))
	}
	// What stays open (README "limits"), said where it applies.
	if w.Exempt && p.RequireLiveLease && w.Kind != gvkPod.Kind {
		d.warn(truncate(fmt.Sprintf("order check skipped: the controller %s has this pod template and was judged on it.", w.Controller), 240))
	}
	if len(d.Unmet) == 0 {
		d.Allowed, d.Reason = true, ReasonRequirementsMet
		for _, v := range armed {
			if !strings.HasPrefix(v.why, EnvFencing+"=") {
				d.warn(truncate(v.label()+": "+v.why, 240))
			}
		}
		return d
	}
	d.Reason = d.Unmet[0].Reason
	if w.Kind == gvkPod.Kind && in.RBACChange == nil && in.ConfigMapChange == nil && d.onlyUnverified() &&
		(in.Operation == admissionv1.Create && in.Subresource == "" || in.Subresource == subresourceBinding) {
		// Pods fail open when the guard itself cannot look (SPEC), so that a guard outage never
		// keeps a controller from recreating, or the scheduler from placing, a crashed writer's
		// Pod: admit, and say what went unchecked. An edit of a running Pod's labels or
		// annotations creates nothing, and may disarm it: it fails closed (the ninth red team
		// disarmed a Pod by relabelling it while the webhook stalled).
		for _, u := range d.Unmet {
			d.warn(truncate("ehdb-election guard could not verify this Pod and admits it (Pods fail open): "+u.Problem, 240))
		}
		d.Allowed, d.Reason, d.Unmet = true, ReasonUnverifiedPod, nil
	}
	return d
}
